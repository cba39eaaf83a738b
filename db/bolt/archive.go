package bolt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/fenceq/fenceq/db"
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

// removeAuditOp: decide checks that the records to remove are the ones
// archived (the chain verifies from the checkpoint and ends at
// req.Through's hash) and older than the cut; apply removes them, moves
// the checkpoint and appends the archive record.
type removeAuditOp struct {
	req      db.RemoveAuditRequest
	cp       db.AuditCheckpoint
	removed  []removedLink
	lastHash []byte
	lastTime int64
}

type removedLink struct {
	seq     uint64
	subject string
}

func (op *removeAuditOp) decide(r reader, now time.Time) error {
	op.cp = auditCheckpoint(r.tx)
	through := op.req.Through
	if through.Seq <= op.cp.Seq {
		return nil // archived and removed before: a repeated call
	}
	head, _, err := r.auditHead()
	if err != nil {
		return err
	}
	if through.Seq > head {
		return db.Errorf(db.CodeInvalid, "audit record %d does not exist (the head is %d)", through.Seq, head)
	}
	audit := r.tx.Bucket(bucketAudit)
	last, err := db.DecodeAuditLink(audit.Get(u64(through.Seq)))
	if err != nil {
		return err
	}
	if !bytes.Equal(last.Hash, through.Hash) {
		return db.Errorf(db.CodeConflict, "audit record %d does not have the hash the archive holds", through.Seq)
	}
	end := min(through.Seq, op.cp.Seq+uint64(op.req.Limit))
	var v db.ChainVerifier
	v.Start(op.cp.Mark())
	cut := op.req.Before.UnixNano()
	c := audit.Cursor()
	for k, val := c.Seek(u64(op.cp.Seq + 1)); k != nil && idFromKey(k) <= end; k, val = c.Next() {
		if !v.Add(idFromKey(k), val) {
			rep := v.ReportSoFar(0, nil)
			return db.Errorf(db.CodeConflict, "the audit chain does not verify (%s): nothing is removed; run fenceq audit verify", rep.Reason)
		}
		l, err := db.DecodeAuditLink(val)
		if err != nil {
			return err
		}
		if op.req.Before.IsZero() || l.Time >= cut {
			return db.Errorf(db.CodeConflict, "audit record %d (%s) is not older than the cut %s", l.Seq,
				db.FromUnixNano(l.Time).Format(time.RFC3339Nano), op.req.Before.UTC().Format(time.RFC3339Nano))
		}
		op.removed = append(op.removed, removedLink{l.Seq, l.Subject})
		op.lastHash, op.lastTime = l.Hash, l.Time
	}
	if len(op.removed) == 0 || op.removed[len(op.removed)-1].seq != end {
		return db.Errorf(db.CodeConflict, "audit record %d is missing: nothing is removed; run fenceq audit verify", end)
	}
	return nil
}

func (op *removeAuditOp) apply(w *writer, _ int) (bool, error) {
	if len(op.removed) == 0 {
		return false, nil
	}
	audit, subjects := w.tx.Bucket(bucketAudit), w.tx.Bucket(bucketAuditSubject)
	for _, l := range op.removed {
		if err := audit.Delete(u64(l.seq)); err != nil {
			return false, err
		}
		if err := subjects.Delete(append(auditSubjectPrefix(l.subject), u64(l.seq)...)); err != nil {
			return false, err
		}
	}
	end := op.removed[len(op.removed)-1].seq
	v := make([]byte, 0, 8+sha256.Size+16)
	v = binary.BigEndian.AppendUint64(v, end)
	v = append(v, op.lastHash...)
	v = binary.BigEndian.AppendUint64(v, uint64(op.lastTime))
	v = binary.BigEndian.AppendUint64(v, uint64(w.now.UnixNano()))
	if err := w.tx.Bucket(bucketMeta).Put(metaAuditCheckpoint, v); err != nil {
		return false, err
	}
	op.cp = auditCheckpoint(w.tx)
	return false, w.audit(db.RemoveAuditEvent(op.req.Principal, op.removed[0].seq, end, op.lastHash))
}
