package api

import (
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// Audit retention: the records older than cfg.AuditRetention leave the
// store only through an archive, in two calls a client makes ("fenceq
// audit archive"): GET /v1/audit/archive streams them as an archive file
// (db.ArchiveWriter), which the client writes, syncs and verifies; then
// POST /v1/audit/archive/remove with the last record it wrote removes
// them, step by step, leaving a checkpoint from which the rest of the
// chain verifies. The server never removes a record on its own: a record
// is removed only once a client said it holds it.

// auditCut is the time before which audit records may be archived, or a
// refusal when retention is off.
func (s *Server) auditCut() (time.Time, error) {
	if s.cfg.AuditRetention <= 0 {
		return time.Time{}, &Error{http.StatusConflict, "failed_precondition",
			"audit retention is off: the server keeps every audit record (start it with --audit-retention to archive older ones)"}
	}
	return s.cfg.Now().Add(-s.cfg.AuditRetention), nil
}

// archiveAudit serves GET /v1/audit/archive?limit=: the stored records older
// than the retention, from the checkpoint on, at most limit of them (0 or
// absent: all), as an archive (application/x-ndjson). Errors before the
// first byte are JSON errors; a failure after it aborts the response
// without the end line, which the client's verification reports as a file
// cut short.
func (s *Server) archiveAudit(c echo.Context) error {
	cut, err := s.auditCut()
	if err != nil {
		return err
	}
	var limit uint64
	if err := queryUint(c, "limit", &limit); err != nil {
		return err
	}
	res := c.Response()
	w := &backupWriter{res: res, rc: http.NewResponseController(res), stall: s.cfg.StallTimeout, contentType: "application/x-ndjson",
		name: "fenceq-audit-" + cut.UTC().Format("20060102T150405Z") + ".jsonl"}
	w.head = c.Request().Method == http.MethodHead
	// A streamed download (streamed in server.go): no deadline as a whole,
	// each write bounded by the stall timeout.
	// The checkpoint and the records come from one snapshot of the log
	// (Store.ArchiveAudit): a removal that another client's archive
	// commits meanwhile cannot break the chain this one writes.
	var aw *db.ArchiveWriter
	err = s.store.ArchiveAudit(c.Request().Context(), db.ArchiveAuditRequest{Before: cut, Limit: limit},
		func(cp db.AuditCheckpoint) error {
			var err error
			aw, err = db.NewArchiveWriter(w, db.ArchiveHeader{StartSeq: cp.Seq, StartHash: cp.Hash,
				Before: cut.UTC(), CreatedAt: s.cfg.Now().UTC()})
			return err
		},
		func(r db.AuditRecord) error { return aw.Add(r) })
	if err == nil {
		err = aw.Close()
	}
	if w.headDone(err) {
		return nil
	}
	if err == nil {
		s.log.Info("audit archive", "principal", principalOf(c), "records", aw.Records(), "through_seq", aw.Last().Seq, "before", cut)
		return nil
	}
	if !w.started {
		return err
	}
	var records uint64
	if aw != nil {
		records = aw.Records()
	}
	s.log.Warn("audit archive aborted after it started", "principal", principalOf(c), "records", records, "err", err)
	panic(http.ErrAbortHandler)
}

type removeAuditBody struct {
	ThroughSeq  uint64 `json:"through_seq"`
	ThroughHash string `json:"through_hash"`
}

type auditCheckpointResponse struct {
	Seq        uint64     `json:"seq"`
	Hash       string     `json:"hash,omitempty"`
	Time       *time.Time `json:"time,omitempty"`
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

func checkpointJSON(cp db.AuditCheckpoint) auditCheckpointResponse {
	out := auditCheckpointResponse{Seq: cp.Seq, Hash: cp.Hash}
	if !cp.Time.IsZero() {
		out.Time, out.ArchivedAt = ptrTime(cp.Time.UTC()), ptrTime(cp.ArchivedAt.UTC())
	}
	return out
}

func ptrTime(t time.Time) *time.Time { return &t }

// removeArchivedAudit serves POST /v1/audit/archive/remove {through_seq,
// through_hash}: it removes the oldest records through through_seq (whose
// hash must be through_hash, the last record of the client's archive), at
// most db.DefaultRemoveStep of them per call, and answers the checkpoint and
// whether it reached through_seq ("done"); the client repeats until it did.
func (s *Server) removeArchivedAudit(c echo.Context) error {
	cut, err := s.auditCut()
	if err != nil {
		return err
	}
	var b removeAuditBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	hash, err := hex.DecodeString(b.ThroughHash)
	if err != nil || len(hash) != 32 {
		return invalidArgument("through_hash must be the 64 hex digits of the last archived record's hash")
	}
	if b.ThroughSeq == 0 {
		return invalidArgument("through_seq must be the sequence of the last archived record")
	}
	cp, err := s.store.RemoveAudit(c.Request().Context(), db.RemoveAuditRequest{Principal: principalOf(c),
		Through: db.AuditMark{Seq: b.ThroughSeq, Hash: hash}, Before: cut})
	if err != nil {
		var refusal *db.Error
		if errors.As(err, &refusal) {
			s.log.Warn("audit removal refused", "principal", principalOf(c), "through_seq", b.ThroughSeq, "reason", refusal.Message)
		}
		return err
	}
	return c.JSON(http.StatusOK, struct {
		Checkpoint auditCheckpointResponse `json:"checkpoint"`
		Done       bool                    `json:"done"`
	}{checkpointJSON(cp), cp.Seq >= b.ThroughSeq})
}
