package api

import (
	"net/http"
	"sync"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

type auditRecordResponse struct {
	Seq       uint64            `json:"seq"`
	Time      time.Time         `json:"time"`
	Principal string            `json:"principal"`
	Action    string            `json:"action"`
	Subject   string            `json:"subject"`
	Token     uint64            `json:"token"`
	Details   map[string]string `json:"details,omitempty"`
	PrevHash  string            `json:"prev_hash"`
	Hash      string            `json:"hash"`
}

// listAudit: GET /v1/audit?after=&limit= → {"records":[…], "next": seq}.
func (s *Server) listAudit(c echo.Context) error {
	after, limit := uint64(0), 100
	if err := queryUint(c, "after", &after); err != nil {
		return err
	}
	if err := queryInt(c, "limit", &limit); err != nil {
		return err
	}
	recs, err := s.store.ListAudit(c.Request().Context(), after, limit)
	if err != nil {
		return err
	}
	out := struct {
		Records []auditRecordResponse `json:"records"`
		Next    uint64                `json:"next,omitempty"`
	}{Records: make([]auditRecordResponse, 0, len(recs))}
	for _, r := range recs {
		out.Records = append(out.Records, auditRecordResponse(r))
	}
	if len(recs) == limit {
		out.Next = recs[len(recs)-1].Seq
	}
	return c.JSON(http.StatusOK, out)
}

type auditReportResponse struct {
	OK       bool   `json:"ok"`
	Records  uint64 `json:"records"`
	HeadSeq  uint64 `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// StartSeq is where the stored chain begins: the checkpoint of the
	// records archived and removed (absent when none were).
	StartSeq  uint64 `json:"start_seq,omitempty"`
	StartHash string `json:"start_hash,omitempty"`
	// VerifiedSeq is the last record that checked out.
	VerifiedSeq uint64 `json:"verified_seq"`
	FirstBroken uint64 `json:"first_broken,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// auditReportJSON is the JSON form of an audit report (GET /v1/audit/verify
// and the status page's audit head).
func auditReportJSON(r db.AuditReport) auditReportResponse {
	return auditReportResponse{OK: r.OK, Records: r.Records, HeadSeq: r.HeadSeq, HeadHash: r.HeadHash,
		StartSeq: r.StartSeq, StartHash: r.StartHash, VerifiedSeq: r.VerifiedSeq,
		FirstBroken: r.FirstBroken, Reason: r.Reason}
}

// verifyAudit: GET /v1/audit/verify walks the chain; 200 either way, "ok"
// says whether it verified.
func (s *Server) verifyAudit(c echo.Context) error {
	rep, err := s.store.VerifyAudit(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, auditReportJSON(rep))
}

// refusalCounter counts refused requests by route and code. Refusals change
// nothing, so they are not in the audit log; they are counted and logged.
type refusalCounter struct {
	mu     sync.Mutex
	counts map[RefusalKey]uint64
}

// RefusalKey names a refusal count: the route ("POST /v1/claim") and the API code.
type RefusalKey struct{ Route, Code string }

func (rc *refusalCounter) add(route, code string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.counts == nil {
		rc.counts = map[RefusalKey]uint64{}
	}
	rc.counts[RefusalKey{route, code}]++
}

// Refusals returns a copy of the refusal counts keyed by "METHOD route" and code.
func (s *Server) Refusals() map[RefusalKey]uint64 {
	s.refusals.mu.Lock()
	defer s.refusals.mu.Unlock()
	out := make(map[RefusalKey]uint64, len(s.refusals.counts))
	for k, v := range s.refusals.counts {
		out[k] = v
	}
	return out
}

type refusalResponse struct {
	Route string `json:"route"`
	Code  string `json:"code"`
	Count uint64 `json:"count"`
}

// commitStatser is a store that counts its group commits (the bbolt
// engine); other stores report zeros.
type commitStatser interface {
	CommitStats() (commits, ops uint64)
}

// stats: GET /v1/stats → commit figures and refusal counts.
func (s *Server) stats(c echo.Context) error {
	var commits, ops uint64
	if cs, ok := s.engine.(commitStatser); ok {
		commits, ops = cs.CommitStats()
	}
	out := struct {
		Commits      uint64            `json:"commits"`
		CommittedOps uint64            `json:"committed_ops"`
		Refusals     []refusalResponse `json:"refusals"`
	}{Commits: commits, CommittedOps: ops, Refusals: []refusalResponse{}}
	for k, v := range s.Refusals() {
		out.Refusals = append(out.Refusals, refusalResponse{k.Route, k.Code, v})
	}
	return c.JSON(http.StatusOK, out)
}
