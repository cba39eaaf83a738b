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
	if err := req.Normalize(); err != nil {
		return db.AuditPage{}, err
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

// AuditHead reads the chain's head row: the newest link and the checkpoint.
func (s *Store) AuditHead(ctx context.Context) (db.AuditHead, error) {
	h, err := readHead(ctx, s.pool, false)
	return h, s.readError(err)
}

// readHead reads the head row, locked to the transaction's end when lock
// is set.
func readHead(ctx context.Context, q querier, lock bool) (db.AuditHead, error) {
	sql := `SELECT seq, hash, cp_seq, cp_hash, cp_time, cp_archived_at FROM fenceq_audit_head WHERE id = 1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var seq, cpSeq, cpTime, cpAt int64
	var hash, cpHash []byte
	if err := q.QueryRow(ctx, sql).
		Scan(&seq, &hash, &cpSeq, &cpHash, &cpTime, &cpAt); err != nil {
		return db.AuditHead{}, err
	}
	h := db.AuditHead{Seq: uint64(seq)}
	if hash != nil {
		h.Hash = hex.EncodeToString(hash)
	}
	if cpSeq > 0 {
		h.Checkpoint = db.AuditCheckpoint{Seq: uint64(cpSeq), Hash: hex.EncodeToString(cpHash),
			Time: db.FromUnixNano(cpTime), ArchivedAt: db.FromUnixNano(cpAt)}
	}
	return h, nil
}

// AuditCounts returns the counters kept with the log.
func (s *Store) AuditCounts(ctx context.Context) (db.AuditCounts, error) {
	out := db.AuditCounts{Actions: map[string]uint64{}}
	rows, err := s.pool.Query(ctx, `SELECT key, sum(n)::bigint FROM fenceq_audit_counts GROUP BY key`)
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

// VerifyAudit walks the whole stored chain, from the checkpoint, in one
// snapshot (a repeatable-read transaction), with the check every engine
// uses (db.ChainVerifier).
func (s *Store) VerifyAudit(ctx context.Context) (db.AuditReport, error) {
	return s.verifyAudit(ctx, db.AuditMark{}, -1)
}

// VerifyAuditFrom walks at most req.Limit records after req.From (or after
// the checkpoint, when req.From is below it) in one snapshot.
func (s *Store) VerifyAuditFrom(ctx context.Context, req db.AuditVerifyRequest) (db.AuditReport, error) {
	if req.Limit < 0 {
		return db.AuditReport{}, db.Errorf(db.CodeInvalid, "limit must not be negative")
	}
	if req.Limit == 0 {
		req.Limit = db.DefaultVerifyStep
	}
	return s.verifyAudit(ctx, req.From, req.Limit)
}

// verifyAudit walks the chain after from (at least the checkpoint): to its
// end when limit < 0, or at most limit records.
func (s *Store) verifyAudit(ctx context.Context, from db.AuditMark, limit int) (db.AuditReport, error) {
	var rep db.AuditReport
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		head, err := readHead(ctx, tx, false)
		if err != nil {
			return err
		}
		if cp := head.Checkpoint; from.Seq < cp.Seq || (from.Seq == 0 && cp.Seq == 0) {
			from = cp.Mark()
		}
		sql := `SELECT seq, link FROM fenceq_audit WHERE seq > $1 ORDER BY seq`
		args := []any{int64(from.Seq)}
		if limit >= 0 {
			sql += ` LIMIT $2`
			args = append(args, limit)
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var v db.ChainVerifier
		v.Start(from)
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
		headHash, _ := hex.DecodeString(head.Hash)
		if head.Hash == "" {
			headHash = nil
		}
		if limit < 0 {
			rep = v.Report(head.Seq, headHash)
		} else {
			rep = v.ReportSoFar(head.Seq, headHash)
		}
		return nil
	})
	return rep, s.readError(err)
}

// RemoveAudit removes up to req.Limit of the oldest stored audit records,
// through req.Through at most, once the caller archived them: it checks
// that they verify from the checkpoint, end at req.Through's hash and are
// older than req.Before, then deletes them, moves the checkpoint and
// appends the archive record, in one transaction (see db.Store).
func (s *Store) RemoveAudit(ctx context.Context, req db.RemoveAuditRequest) (db.AuditCheckpoint, error) {
	if err := req.Normalize(); err != nil {
		return db.AuditCheckpoint{}, err
	}
	var cp db.AuditCheckpoint
	err := s.update(ctx, func(w *writer) error {
		// Locked here, not only at the batch's end: the checkpoint moves
		// by what this reads. Nothing the batch does after waits for a
		// lock (opPlan), so holding the head early cannot deadlock.
		head, err := readHead(w.ctx, w.tx, true)
		if err != nil {
			return err
		}
		cp = head.Checkpoint
		p, err := db.PlanAuditRemoval(req, cp, head.Seq)
		if err != nil || p.Done() {
			return err
		}
		var lastStored []byte
		if err := w.tx.QueryRow(w.ctx, `SELECT link FROM fenceq_audit WHERE seq = $1`, int64(req.Through.Seq)).Scan(&lastStored); err != nil {
			return err
		}
		if err := p.CheckThrough(lastStored); err != nil {
			return err
		}
		rows, err := w.tx.Query(w.ctx, `SELECT seq, link FROM fenceq_audit WHERE seq > $1 AND seq <= $2 ORDER BY seq`, int64(p.After()), int64(p.End()))
		if err != nil {
			return err
		}
		for rows.Next() {
			var seq int64
			var val []byte
			if err := rows.Scan(&seq, &val); err != nil {
				rows.Close()
				return err
			}
			if err := p.Add(uint64(seq), val); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := p.Finish(); err != nil {
			return err
		}
		last := p.Last()
		if _, err := w.tx.Exec(w.ctx, `DELETE FROM fenceq_audit WHERE seq > $1 AND seq <= $2`, int64(p.After()), int64(last.Seq)); err != nil {
			return err
		}
		if _, err := w.tx.Exec(w.ctx, `UPDATE fenceq_audit_head SET cp_seq = $1, cp_hash = $2, cp_time = $3, cp_archived_at = $4 WHERE id = 1`,
			int64(last.Seq), last.Hash, last.Time, w.now.UnixNano()); err != nil {
			return err
		}
		cp = p.Checkpoint(w.now)
		w.audit(p.Event())
		return nil
	})
	return cp, err
}

// ArchiveAudit reads the checkpoint and the records to archive in one
// snapshot (a repeatable-read transaction), a page at a time (see
// db.Store): a removal committed meanwhile does not touch what it reads.
func (s *Store) ArchiveAudit(ctx context.Context, req db.ArchiveAuditRequest, start func(db.AuditCheckpoint) error, add func(db.AuditRecord) error) error {
	var fault error // an error of start or add, returned as it is
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		head, err := readHead(ctx, tx, false)
		if err != nil {
			return err
		}
		if fault = start(head.Checkpoint); fault != nil {
			return fault
		}
		after, n := head.Checkpoint.Seq, uint64(0)
		for {
			page, err := auditPage(ctx, tx, after, db.MaxListLimit)
			if err != nil {
				return err
			}
			for _, r := range page {
				if !req.Archives(r, n) {
					return nil
				}
				if fault = add(r); fault != nil {
					return fault
				}
				after, n = r.Seq, n+1
			}
			if len(page) < db.MaxListLimit {
				return nil
			}
		}
	})
	if fault != nil {
		return fault
	}
	return s.readError(err)
}

// auditPage reads up to limit links after seq in tx.
func auditPage(ctx context.Context, tx pgx.Tx, after uint64, limit int) ([]db.AuditRecord, error) {
	rows, err := tx.Query(ctx, `SELECT seq, link FROM fenceq_audit WHERE seq > $1 ORDER BY seq LIMIT $2`, int64(after), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []db.AuditRecord
	for rows.Next() {
		var seq int64
		var v []byte
		if err := rows.Scan(&seq, &v); err != nil {
			return nil, err
		}
		l, err := db.DecodeAuditLink(v)
		if err != nil {
			return nil, fmt.Errorf("audit record %d: %w", seq, err)
		}
		out = append(out, l.Record())
	}
	return out, rows.Err()
}
