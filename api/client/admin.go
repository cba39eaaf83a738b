package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Stats is GET /v1/stats: commit figures and refused requests.
type Stats struct {
	// Commits is how many write transactions the store committed;
	// CommittedOps how many mutations they carried (group commit).
	Commits      uint64    `json:"commits"`
	CommittedOps uint64    `json:"committed_ops"`
	Refusals     []Refusal `json:"refusals"`
}

// Refusal counts refused requests of one route with one code.
type Refusal struct {
	Route string `json:"route"`
	Code  string `json:"code"`
	Count uint64 `json:"count"`
}

// Stats returns the server's commit and refusal counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/stats"}, &s)
	return s, err
}

// AuditRecord is one record of the audit log.
type AuditRecord struct {
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

// AuditPage is one page of the audit log. Next, when not 0, is the after
// of the next page.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	Next    uint64        `json:"next,omitempty"`
}

// Audit returns up to limit audit records with a sequence above after
// (admin). limit 0 is the server's default (100).
func (c *Client) Audit(ctx context.Context, after uint64, limit int) (AuditPage, error) {
	q := url.Values{}
	if after != 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p AuditPage
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/audit", query: q}, &p)
	return p, err
}

// AuditReport is the result of walking the audit chain.
type AuditReport struct {
	OK       bool   `json:"ok"`
	Records  uint64 `json:"records"`
	HeadSeq  uint64 `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// StartSeq is the checkpoint the stored chain starts after (the last
	// archived record); 0 when none was archived.
	StartSeq    uint64 `json:"start_seq,omitempty"`
	StartHash   string `json:"start_hash,omitempty"`
	VerifiedSeq uint64 `json:"verified_seq"`
	FirstBroken uint64 `json:"first_broken,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// VerifyAudit makes the server walk its audit chain (admin). A broken
// chain is not an error: the report's OK is false and FirstBroken names
// the first record that does not verify.
func (c *Client) VerifyAudit(ctx context.Context) (AuditReport, error) {
	var r AuditReport
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/audit/verify"}, &r)
	return r, err
}

// Backup streams a consistent snapshot of the server's database file (GET
// /v1/backup, admin) to w and returns the bytes written. The snapshot is a
// complete bbolt file: to restore, stop the server and put it in place of
// --db. A transfer cut short is an error (the server aborts the response
// rather than end it early), so a nil error means w got the whole file;
// still, write to a temporary name and rename it when Backup returned nil.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	return c.stream(ctx, request{method: http.MethodGet, escapedPath: "/v1/backup"}, w)
}

// stream copies the answer to r into w, and fails when it ends short of
// the length the server announced.
func (c *Client) stream(ctx context.Context, r request, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("fenceq: %s %s: after %d bytes: %w", r.method, r.escapedPath, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("fenceq: %s %s: got %d bytes, the server announced %d", r.method, r.escapedPath, n, resp.ContentLength)
	}
	return n, nil
}

// ArchiveAudit streams the audit records older than the server's
// --audit-retention (GET /v1/audit/archive, admin) to w as an archive file
// and returns the bytes written; limit bounds the records (0: all). It
// removes nothing (RemoveArchivedAudit does). Verify what w got before you
// rely on it: a transfer cut short lacks the archive's end line.
func (c *Client) ArchiveAudit(ctx context.Context, w io.Writer, limit uint64) (int64, error) {
	r := request{method: http.MethodGet, escapedPath: "/v1/audit/archive"}
	if limit > 0 {
		r.query = url.Values{"limit": {strconv.FormatUint(limit, 10)}}
	}
	return c.stream(ctx, r, w)
}

// AuditCheckpoint is where the server's stored audit chain begins: the
// last record archived and removed.
type AuditCheckpoint struct {
	Seq        uint64     `json:"seq"`
	Hash       string     `json:"hash,omitempty"`
	Time       *time.Time `json:"time,omitempty"`
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// RemoveArchivedAudit asks the server to remove its oldest audit records
// through throughSeq, whose hash must be throughHash (POST
// /v1/audit/archive/remove, admin). One call removes a bounded number;
// done says whether the checkpoint reached throughSeq. Call it only once
// the archive holding those records is written and synced.
func (c *Client) RemoveArchivedAudit(ctx context.Context, throughSeq uint64, throughHash string) (cp AuditCheckpoint, done bool, err error) {
	var out struct {
		Checkpoint AuditCheckpoint `json:"checkpoint"`
		Done       bool            `json:"done"`
	}
	_, err = c.do(ctx, request{method: http.MethodPost, escapedPath: "/v1/audit/archive/remove",
		body: map[string]any{"through_seq": throughSeq, "through_hash": throughHash}}, &out)
	return out.Checkpoint, out.Done, err
}
