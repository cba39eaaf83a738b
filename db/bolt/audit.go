package bolt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	bbolt "go.etcd.io/bbolt"
)

// audit appends e to the audit chain, in the transaction of the change it
// describes, with its entry in the subject index. The head and the audit
// counts it moves are written when the commit ends (flush).
func (w *writer) audit(e db.AuditEvent) error {
	seq, prev, err := w.auditHead()
	if err != nil {
		return err
	}
	rec := db.NextAuditLink(seq, prev, w.now, e)
	v, err := rec.Seal()
	if err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketAudit).Put(u64(rec.Seq), v); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketAuditSubject).Put(append(auditSubjectPrefix(rec.Subject), u64(rec.Seq)...), nil); err != nil {
		return err
	}
	t := w.tail
	if t.auditCounts == nil {
		t.auditCounts = map[string]uint64{}
	}
	for _, k := range db.AuditCountKeys(&rec) {
		t.auditCounts[k]++
	}
	t.head = auditHead{seq: rec.Seq, hash: rec.Hash, read: true, moved: true}
	return nil
}

// auditSubjectPrefix is the subject part of an idx_audit_subject key,
// 0x00 included. A job's subject is "job:" and its id as 8 bytes
// big-endian, so the keys of recent jobs (the busy ones) sit together at
// the end of the index rather than spread by decimal string order; other
// subjects ("lease:<name>", "jobs") are their text, which has no 0x00.
func auditSubjectPrefix(subject string) []byte {
	if rest, ok := strings.CutPrefix(subject, "job:"); ok {
		if id, err := strconv.ParseUint(rest, 10, 64); err == nil && strconv.FormatUint(id, 10) == rest {
			return append(append([]byte("job:"), u64(id)...), 0)
		}
	}
	return append([]byte(subject), 0)
}

// ListAuditBySubject returns the newest records of req.Subject first, found
// through the subject index: O(log n + limit), whatever the log's size. A
// file opened read-only that predates the index has no history to show. It
// returns CodeInvalid for a limit outside 1..MaxListLimit.
func (s *Store) ListAuditBySubject(ctx context.Context, req db.AuditSubjectRequest) (db.AuditPage, error) {
	if err := req.Normalize(); err != nil {
		return db.AuditPage{}, err
	}
	var err error
	page := db.AuditPage{Records: []db.AuditRecord{}}
	err = s.view(func(tx *bbolt.Tx) error {
		idx := tx.Bucket(bucketAuditSubject)
		if idx == nil {
			return nil
		}
		prefix := auditSubjectPrefix(req.Subject)
		before := req.Before
		if before == 0 {
			before = ^uint64(0)
		}
		c := idx.Cursor()
		k, _ := c.Seek(append(bytes.Clone(prefix), u64(before)...))
		if k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
		audit := tx.Bucket(bucketAudit)
		for ; k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8; k, _ = c.Prev() {
			if len(page.Records) == req.Limit {
				page.Next = page.Records[len(page.Records)-1].Seq
				return nil
			}
			seq := idFromKey(k)
			v := audit.Get(u64(seq))
			if v == nil {
				return fmt.Errorf("%w: the subject index points at audit record %d, which does not exist", db.ErrCorrupt, seq)
			}
			var r db.AuditLink
			if err := msgrec.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("%w: audit record %d: %v", db.ErrCorrupt, seq, err)
			}
			page.Records = append(page.Records, r.Record())
		}
		return nil
	})
	if err != nil {
		return db.AuditPage{}, err
	}
	return page, nil
}

// AuditHead reads the chain head and the checkpoint from meta: two
// lookups, no walk.
func (s *Store) AuditHead(ctx context.Context) (db.AuditHead, error) {
	var head db.AuditHead
	err := s.view(func(tx *bbolt.Tx) error {
		seq, hash := readAuditHead(tx)
		head = db.AuditHead{Seq: seq, Checkpoint: auditCheckpoint(tx)}
		if hash != nil {
			head.Hash = hex.EncodeToString(hash)
		}
		return nil
	})
	return head, err
}

// readAuditHead is the newest link's sequence and hash (0 and nil for an
// empty log).
func readAuditHead(tx *bbolt.Tx) (uint64, []byte) {
	if v := tx.Bucket(bucketMeta).Get(metaAuditHead); len(v) == 8+sha256.Size {
		return idFromKey(v[:8]), bytes.Clone(v[8:])
	}
	return 0, nil
}

// auditCheckpoint reads the checkpoint the last removal left (the zero
// value when none did).
func auditCheckpoint(tx *bbolt.Tx) db.AuditCheckpoint {
	v := tx.Bucket(bucketMeta).Get(metaAuditCheckpoint)
	if len(v) != 8+sha256.Size+16 {
		return db.AuditCheckpoint{}
	}
	return db.AuditCheckpoint{Seq: idFromKey(v[:8]), Hash: hex.EncodeToString(v[8 : 8+sha256.Size]),
		Time:       db.FromUnixNano(int64(idFromKey(v[8+sha256.Size : 16+sha256.Size]))),
		ArchivedAt: db.FromUnixNano(int64(idFromKey(v[16+sha256.Size:])))}
}

// AuditCounts returns the audit record counters. A file opened read-only
// that predates them reports none.
func (s *Store) AuditCounts(ctx context.Context) (db.AuditCounts, error) {
	out := db.AuditCounts{Actions: map[string]uint64{}}
	err := s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketAuditCounts)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: audit count %q", db.ErrCorrupt, k)
			}
			switch n := idFromKey(v); string(k) {
			case db.AuditCountReclaimed:
				out.Reclaimed = n
			case db.AuditCountExpiredDead:
				out.ExpiredDead = n
			default:
				out.Actions[string(k)] = n
			}
			return nil
		})
	})
	return out, err
}

// ListAudit returns up to limit records with a sequence above after.
func (s *Store) ListAudit(ctx context.Context, after uint64, limit int) ([]db.AuditRecord, error) {
	if limit <= 0 || limit > db.MaxListLimit {
		return nil, db.Errorf(db.CodeInvalid, "limit must be between 1 and %d", db.MaxListLimit)
	}
	out := []db.AuditRecord{}
	err := s.view(func(tx *bbolt.Tx) error {
		if after == ^uint64(0) {
			return nil
		}
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			var r db.AuditLink
			if err := msgrec.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("%w: audit record %d: %v", db.ErrCorrupt, idFromKey(k), err)
			}
			out = append(out, r.Record())
		}
		return nil
	})
	return out, err
}

// VerifyAudit walks the whole stored chain, from the checkpoint, in one
// read transaction and reports the first record whose sequence, prev_hash
// or hash does not check out.
func (s *Store) VerifyAudit(ctx context.Context) (db.AuditReport, error) {
	var rep db.AuditReport
	err := s.view(func(tx *bbolt.Tx) error {
		rep = verifyAudit(tx, auditCheckpoint(tx).Mark(), -1)
		return nil
	})
	return rep, err
}

// VerifyAuditFrom walks at most req.Limit records after req.From (or after
// the checkpoint, when req.From is below it) in one read transaction.
func (s *Store) VerifyAuditFrom(ctx context.Context, req db.AuditVerifyRequest) (db.AuditReport, error) {
	if req.Limit < 0 {
		return db.AuditReport{}, db.Errorf(db.CodeInvalid, "limit must not be negative")
	}
	if req.Limit == 0 {
		req.Limit = db.DefaultVerifyStep
	}
	var rep db.AuditReport
	err := s.view(func(tx *bbolt.Tx) error {
		from := req.From
		if cp := auditCheckpoint(tx); from.Seq < cp.Seq {
			from = cp.Mark()
		}
		rep = verifyAudit(tx, from, req.Limit)
		return nil
	})
	return rep, err
}

// verifyAudit walks the chain after from: to its end when limit < 0, or at
// most limit records.
func verifyAudit(tx *bbolt.Tx, from db.AuditMark, limit int) db.AuditReport {
	var v db.ChainVerifier
	v.Start(from)
	c := tx.Bucket(bucketAudit).Cursor()
	n := 0
	for k, val := c.Seek(u64(from.Seq + 1)); k != nil && n != limit && v.Add(idFromKey(k), val); k, val = c.Next() {
		n++
	}
	seq, hash := readAuditHead(tx)
	if limit < 0 {
		return v.Report(seq, hash)
	}
	return v.ReportSoFar(seq, hash)
}
