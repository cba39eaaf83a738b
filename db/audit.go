package db

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
)

// auditRecord is one link of the audit chain. Its hash is
// SHA-256(prev_hash ‖ msgpack(record with hash omitted)), where the msgpack
// encoding is a map of the fields below in declaration order, details with
// sorted keys, times as Unix nanoseconds. Field names are the map keys; they
// are never renamed.
type auditRecord struct {
	Seq       uint64            `msgpack:"seq"`
	Time      int64             `msgpack:"time"`
	Principal string            `msgpack:"principal"`
	Action    string            `msgpack:"action"`
	Subject   string            `msgpack:"subject"`
	Token     uint64            `msgpack:"token"`
	Details   map[string]string `msgpack:"details,omitempty"`
	PrevHash  []byte            `msgpack:"prev_hash"`
	Hash      []byte            `msgpack:"hash,omitempty"`
}

// auditEntry is what an operation says about its change.
type auditEntry struct {
	Principal string
	Action    string
	Job       uint64 // subject "job:<id>" when set
	Subject   string // otherwise, e.g. "lease:<name>"
	Token     uint64
	Details   map[string]string
}

// appendAudit adds a record to the chain in tx, the transaction of the
// change it describes.
func appendAudit(tx *bolt.Tx, now time.Time, e auditEntry) error {
	meta := tx.Bucket(bucketMeta)
	var seq uint64
	prev := make([]byte, sha256.Size)
	if head := meta.Get(metaAuditHead); head != nil {
		seq = idFromKey(head[:8])
		copy(prev, head[8:])
	}
	subject := e.Subject
	if e.Job != 0 {
		subject = fmt.Sprintf("job:%d", e.Job)
	}
	rec := auditRecord{Seq: seq + 1, Time: now.UnixNano(), Principal: e.Principal, Action: e.Action,
		Subject: subject, Token: e.Token, Details: e.Details, PrevHash: prev}
	h, err := auditHash(&rec)
	if err != nil {
		return err
	}
	rec.Hash = h
	v, err := encodeRecord(&rec)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketAudit).Put(u64(rec.Seq), v); err != nil {
		return err
	}
	return meta.Put(metaAuditHead, append(u64(rec.Seq), h...))
}

// auditHash computes SHA-256(prev_hash ‖ msgpack(record without hash)).
func auditHash(rec *auditRecord) ([]byte, error) {
	c := *rec
	c.Hash = nil
	b, err := encodeRecord(&c)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(rec.PrevHash)
	h.Write(b)
	return h.Sum(nil), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// AuditRecord is one audit log entry as callers see it.
type AuditRecord struct {
	Seq       uint64
	Time      time.Time
	Principal string
	Action    string
	Subject   string
	Token     uint64
	Details   map[string]string
	PrevHash  string // hex
	Hash      string // hex
}

// ListAudit returns up to limit records with a sequence above after.
func (s *Store) ListAudit(ctx context.Context, after uint64, limit int) ([]AuditRecord, error) {
	if limit <= 0 || limit > MaxListLimit {
		return nil, fmt.Errorf("%w: limit must be between 1 and %d", ErrInvalidArgument, MaxListLimit)
	}
	out := []AuditRecord{}
	err := s.view(func(tx *bolt.Tx) error {
		if after == ^uint64(0) {
			return nil
		}
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			var r auditRecord
			if err := msgpack.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("%w: audit record %d: %v", ErrCorrupt, idFromKey(k), err)
			}
			out = append(out, AuditRecord{Seq: r.Seq, Time: fromUnixNano(r.Time), Principal: r.Principal,
				Action: r.Action, Subject: r.Subject, Token: r.Token, Details: r.Details,
				PrevHash: hex.EncodeToString(r.PrevHash), Hash: hex.EncodeToString(r.Hash)})
		}
		return nil
	})
	return out, err
}

// AuditReport is the result of walking the audit chain.
type AuditReport struct {
	Records     uint64 // records walked
	HeadSeq     uint64 // the head recorded in meta
	HeadHash    string // hex
	OK          bool
	FirstBroken uint64 // sequence of the first record that does not verify; 0 when OK
	Reason      string
}

// VerifyAudit walks the whole chain in one read transaction and reports
// the first record whose sequence, prev_hash or hash does not check out.
func (s *Store) VerifyAudit(ctx context.Context) (AuditReport, error) {
	var rep AuditReport
	err := s.view(func(tx *bolt.Tx) error {
		rep = verifyAudit(tx)
		return nil
	})
	return rep, err
}

func verifyAudit(tx *bolt.Tx) AuditReport {
	var rep AuditReport
	if head := tx.Bucket(bucketMeta).Get(metaAuditHead); len(head) == 8+sha256.Size {
		rep.HeadSeq = idFromKey(head[:8])
		rep.HeadHash = hex.EncodeToString(head[8:])
	}
	broken := func(seq uint64, format string, args ...any) AuditReport {
		rep.FirstBroken, rep.Reason = seq, fmt.Sprintf(format, args...)
		return rep
	}
	prev := make([]byte, sha256.Size)
	want := uint64(1)
	c := tx.Bucket(bucketAudit).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		rep.Records++
		if idFromKey(k) != want {
			return broken(want, "record %d is missing (found %d)", want, idFromKey(k))
		}
		var r auditRecord
		if err := msgpack.Unmarshal(v, &r); err != nil {
			return broken(want, "record %d does not decode: %v", want, err)
		}
		if r.Seq != want {
			return broken(want, "record %d says it is %d", want, r.Seq)
		}
		if !bytes.Equal(r.PrevHash, prev) {
			return broken(want, "record %d: prev_hash does not match record %d's hash", want, want-1)
		}
		h, err := auditHash(&r)
		if err != nil || !bytes.Equal(h, r.Hash) {
			return broken(want, "record %d: hash does not match its contents", want)
		}
		prev = r.Hash
		want++
	}
	if rep.Records != rep.HeadSeq || (rep.Records > 0 && hex.EncodeToString(prev) != rep.HeadHash) {
		return broken(rep.Records+1, "chain ends at %d but the head says %d", rep.Records, rep.HeadSeq)
	}
	rep.OK = true
	return rep
}
