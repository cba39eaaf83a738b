package postgres

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// ListAudit returns up to limit links with a sequence above after.
func (s *Store) ListAudit(ctx context.Context, after uint64, limit int) ([]db.AuditRecord, error) {
	if limit <= 0 || limit > db.MaxListLimit {
		return nil, db.Errorf(db.CodeInvalid, "limit must be between 1 and %d", db.MaxListLimit)
	}
	out := []db.AuditRecord{}
	if after >= 1<<63-1 {
		return out, nil
	}
	err := s.auditRows(ctx, &out, `SELECT seq, link FROM fenceq_audit WHERE seq > $1 ORDER BY seq LIMIT $2`, int64(after), limit)
	return out, err
}

func (s *Store) auditRows(ctx context.Context, out *[]db.AuditRecord, sql string, args ...any) error {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return s.readError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var v []byte
		if err := rows.Scan(&seq, &v); err != nil {
			return s.readError(err)
		}
		l, err := db.DecodeAuditLink(v)
		if err != nil {
			return fmt.Errorf("audit record %d: %w", seq, err)
		}
		*out = append(*out, l.Record())
	}
	return s.readError(rows.Err())
}

// ListAuditBySubject pages backwards through one subject's records, from
// the subject index.
func (s *Store) ListAuditBySubject(ctx context.Context, req db.AuditSubjectRequest) (db.AuditPage, error) {
	var err error
	if req.Limit, err = db.ListLimit(req.Limit); err != nil {
		return db.AuditPage{}, err
	}
	if req.Subject == "" {
		return db.AuditPage{}, db.Errorf(db.CodeInvalid, "subject is required")
	}
	before := int64(1<<63 - 1)
	if req.Before != 0 && req.Before < 1<<63-1 {
		before = int64(req.Before)
	}
	page := db.AuditPage{Records: []db.AuditRecord{}}
	if err := s.auditRows(ctx, &page.Records, `SELECT seq, link FROM fenceq_audit WHERE subject = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`,
		req.Subject, before, req.Limit+1); err != nil {
		return db.AuditPage{}, err
	}
	if len(page.Records) > req.Limit {
		page.Records = page.Records[:req.Limit]
		page.Next = page.Records[req.Limit-1].Seq
	}
	return page, nil
}

// AuditHead reads the chain's head row.
func (s *Store) AuditHead(ctx context.Context) (db.AuditHead, error) {
	var seq int64
	var hash []byte
	if err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM fenceq_audit_head WHERE id = 1`).Scan(&seq, &hash); err != nil {
		return db.AuditHead{}, s.readError(err)
	}
	h := db.AuditHead{Seq: uint64(seq)}
	if hash != nil {
		h.Hash = hex.EncodeToString(hash)
	}
	return h, nil
}

// AuditCounts returns the counters kept with the log.
func (s *Store) AuditCounts(ctx context.Context) (db.AuditCounts, error) {
	out := db.AuditCounts{Actions: map[string]uint64{}}
	rows, err := s.pool.Query(ctx, `SELECT key, n FROM fenceq_audit_counts`)
	if err != nil {
		return out, s.readError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return out, s.readError(err)
		}
		switch k {
		case db.AuditCountReclaimed:
			out.Reclaimed = uint64(n)
		case db.AuditCountExpiredDead:
			out.ExpiredDead = uint64(n)
		default:
			out.Actions[k] = uint64(n)
		}
	}
	return out, s.readError(rows.Err())
}

// VerifyAudit walks the whole chain in one snapshot (a repeatable-read
// transaction), with the check every engine uses (db.ChainVerifier).
func (s *Store) VerifyAudit(ctx context.Context) (db.AuditReport, error) {
	var rep db.AuditReport
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var headSeq int64
		var headHash []byte
		if err := tx.QueryRow(ctx, `SELECT seq, hash FROM fenceq_audit_head WHERE id = 1`).Scan(&headSeq, &headHash); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, link FROM fenceq_audit ORDER BY seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		var v db.ChainVerifier
		for rows.Next() {
			var seq int64
			var link []byte
			if err := rows.Scan(&seq, &link); err != nil {
				return err
			}
			if !v.Add(uint64(seq), link) {
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rep = v.Report(uint64(headSeq), headHash)
		return nil
	})
	return rep, s.readError(err)
}
