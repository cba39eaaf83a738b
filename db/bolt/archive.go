package bolt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// RemoveAudit removes up to req.Limit of the oldest stored audit records,
// through req.Through at most, once the caller archived them (see
// db.Store). It returns the checkpoint after the call.
func (s *Store) RemoveAudit(ctx context.Context, req db.RemoveAuditRequest) (db.AuditCheckpoint, error) {
	if err := req.Normalize(); err != nil {
		return db.AuditCheckpoint{}, err
	}
	op := &removeAuditOp{req: req}
	if err := s.update(ctx, op); err != nil {
		return db.AuditCheckpoint{}, err
	}
	return op.cp, nil
}

// removeAuditOp: decide feeds the removal's plan (db.PlanAuditRemoval,
// which makes every check and refusal) what it reads: the checkpoint, the
// head, the record at req.Through and the records to remove; apply
// removes them, moves the checkpoint and appends the archive record.
type removeAuditOp struct {
	req  db.RemoveAuditRequest
	cp   db.AuditCheckpoint
	plan *db.AuditRemoval
}

func (op *removeAuditOp) decide(r reader, now time.Time) error {
	op.cp = auditCheckpoint(r.tx)
	head, _, err := r.auditHead()
	if err != nil {
		return err
	}
	p, err := db.PlanAuditRemoval(op.req, op.cp, head)
	if err != nil || p.Done() {
		return err
	}
	audit := r.tx.Bucket(bucketAudit)
	if err := p.CheckThrough(audit.Get(u64(op.req.Through.Seq))); err != nil {
		return err
	}
	c := audit.Cursor()
	for k, val := c.Seek(u64(p.After() + 1)); k != nil && idFromKey(k) <= p.End(); k, val = c.Next() {
		if err := p.Add(idFromKey(k), val); err != nil {
			return err
		}
	}
	if err := p.Finish(); err != nil {
		return err
	}
	op.plan = p
	return nil
}

func (op *removeAuditOp) apply(w *writer, _ int) (bool, error) {
	p := op.plan
	if p == nil {
		return false, nil
	}
	audit, subjects := w.tx.Bucket(bucketAudit), w.tx.Bucket(bucketAuditSubject)
	for _, l := range p.Removed() {
		if err := audit.Delete(u64(l.Seq)); err != nil {
			return false, err
		}
		if err := subjects.Delete(append(auditSubjectPrefix(l.Subject), u64(l.Seq)...)); err != nil {
			return false, err
		}
	}
	last := p.Last()
	v := make([]byte, 0, 8+sha256.Size+16)
	v = binary.BigEndian.AppendUint64(v, last.Seq)
	v = append(v, last.Hash...)
	v = binary.BigEndian.AppendUint64(v, uint64(last.Time))
	v = binary.BigEndian.AppendUint64(v, uint64(w.now.UnixNano()))
	if err := w.tx.Bucket(bucketMeta).Put(metaAuditCheckpoint, v); err != nil {
		return false, err
	}
	op.cp = auditCheckpoint(w.tx)
	return false, w.audit(p.Event())
}

// ArchiveAudit reads the checkpoint and the records to archive in one read
// transaction (see db.Store): a removal committed meanwhile does not touch
// what it reads. Like a backup, it holds the transaction while its caller
// writes each record on.
func (s *Store) ArchiveAudit(ctx context.Context, req db.ArchiveAuditRequest, start func(db.AuditCheckpoint) error, add func(db.AuditRecord) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.view(func(tx *bbolt.Tx) error {
		cp := auditCheckpoint(tx)
		if err := start(cp); err != nil {
			return err
		}
		var n uint64
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(u64(cp.Seq + 1)); k != nil; k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			l, err := db.DecodeAuditLink(v)
			if err != nil {
				return fmt.Errorf("audit record %d: %w", idFromKey(k), err)
			}
			r := l.Record()
			if !req.Archives(r, n) {
				return nil
			}
			if err := add(r); err != nil {
				return err
			}
			n++
		}
		return nil
	})
}
