package db

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
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
	v, err := sealAudit(&rec)
	if err != nil {
		return err
	}
	h := rec.Hash
	audit := tx.Bucket(bucketAudit)
	audit.FillPercent = 1.0 // keys only ever grow: fill pages instead of splitting them half empty
	if err := audit.Put(u64(rec.Seq), v); err != nil {
		return err
	}
	if err := indexAudit(tx, &rec); err != nil {
		return err
	}
	return meta.Put(metaAuditHead, append(u64(rec.Seq), h...))
}

// Keys of bucketAuditCounts besides the action names: the two ends of an
// expired lease (a claim with reclaimed_from, and a job killed by the claim
// path with "lease expired").
const (
	auditCountReclaimed   = "expiry:reclaimed"
	auditCountExpiredDead = "expiry:dead"
)

// auditCountKeys names the counters a record adds one to.
func auditCountKeys(r *auditRecord) []string {
	keys := []string{r.Action}
	switch {
	case r.Action == "claim" && r.Details["reclaimed_from"] != "":
		keys = append(keys, auditCountReclaimed)
	case r.Action == "dead" && r.Principal == "system" && r.Details["error"] == "lease expired":
		keys = append(keys, auditCountExpiredDead)
	}
	return keys
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

// indexAudit adds rec to the subject index and the action counters, in the
// transaction that appends it.
func indexAudit(tx *bolt.Tx, rec *auditRecord) error {
	if err := tx.Bucket(bucketAuditSubject).Put(append(auditSubjectPrefix(rec.Subject), u64(rec.Seq)...), nil); err != nil {
		return err
	}
	counts := tx.Bucket(bucketAuditCounts)
	for _, k := range auditCountKeys(rec) {
		var n uint64
		if v := counts.Get([]byte(k)); len(v) == 8 {
			n = idFromKey(v)
		}
		if err := counts.Put([]byte(k), u64(n+1)); err != nil {
			return err
		}
	}
	return nil
}

// buildAuditIndexes fills idx_audit_subject and audit_counts from the log
// when the file predates them (the buckets are empty but the log is not).
// It runs once, in the transaction of Open that created the buckets.
// Records that do not decode are left out: VerifyAudit reports them.
func buildAuditIndexes(tx *bolt.Tx) error {
	audit, subjects, counts := tx.Bucket(bucketAudit), tx.Bucket(bucketAuditSubject), tx.Bucket(bucketAuditCounts)
	if k, _ := audit.Cursor().First(); k == nil {
		return nil
	}
	needSubjects := isEmptyBucket(subjects)
	needCounts := isEmptyBucket(counts)
	if !needSubjects && !needCounts {
		return nil
	}
	tally := map[string]uint64{}
	err := audit.ForEach(func(k, v []byte) error {
		var r auditRecord
		if len(k) != 8 || unmarshalRecord(v, &r) != nil {
			return nil
		}
		if needSubjects {
			if err := subjects.Put(append(auditSubjectPrefix(r.Subject), k...), nil); err != nil {
				return err
			}
		}
		for _, key := range auditCountKeys(&r) {
			tally[key]++
		}
		return nil
	})
	if err != nil || !needCounts {
		return err
	}
	for k, n := range tally {
		if err := counts.Put([]byte(k), u64(n)); err != nil {
			return err
		}
	}
	return nil
}

func isEmptyBucket(b *bolt.Bucket) bool {
	k, _ := b.Cursor().First()
	return k == nil
}

func (r *auditRecord) public() AuditRecord {
	return AuditRecord{Seq: r.Seq, Time: fromUnixNano(r.Time), Principal: r.Principal,
		Action: r.Action, Subject: r.Subject, Token: r.Token, Details: r.Details,
		PrevHash: hex.EncodeToString(r.PrevHash), Hash: hex.EncodeToString(r.Hash)}
}

// JobSubject is the audit subject of job id ("job:<id>").
func JobSubject(id uint64) string { return "job:" + strconv.FormatUint(id, 10) }

// AuditSubjectRequest pages backwards through the audit records of one
// subject: a job ("job:<id>", see JobSubject) or a named lease
// ("lease:<name>").
type AuditSubjectRequest struct {
	Subject string
	Before  uint64 // cursor: records with a lower sequence; 0 starts at the newest
	Limit   int    // 0: DefaultListLimit; at most MaxListLimit
}

// AuditPage is a page of audit records. Next is the cursor for the
// following page (the Before of the next request), 0 when there is none.
type AuditPage struct {
	Records []AuditRecord
	Next    uint64
}

// ListAuditBySubject returns the newest records of req.Subject first, found
// through the subject index: O(log n + limit), whatever the log's size. A
// file opened read-only that predates the index has no history to show. It
// returns ErrInvalidArgument for a limit outside 1..MaxListLimit.
func (s *Store) ListAuditBySubject(ctx context.Context, req AuditSubjectRequest) (AuditPage, error) {
	var err error
	if req.Limit, err = listLimit(req.Limit); err != nil {
		return AuditPage{}, err
	}
	if req.Subject == "" {
		return AuditPage{}, fmt.Errorf("%w: subject is required", ErrInvalidArgument)
	}
	page := AuditPage{Records: []AuditRecord{}}
	err = s.view(func(tx *bolt.Tx) error {
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
				return fmt.Errorf("%w: the subject index points at audit record %d, which does not exist", ErrCorrupt, seq)
			}
			var r auditRecord
			if err := unmarshalRecord(v, &r); err != nil {
				return fmt.Errorf("%w: audit record %d: %v", ErrCorrupt, seq, err)
			}
			page.Records = append(page.Records, r.public())
		}
		return nil
	})
	if err != nil {
		return AuditPage{}, err
	}
	return page, nil
}

// AuditHead is the newest link of the audit chain.
type AuditHead struct {
	Seq  uint64 // 0 when the log is empty
	Hash string // hex
}

// AuditHead reads the chain head from meta: one lookup, no walk.
func (s *Store) AuditHead(ctx context.Context) (AuditHead, error) {
	var head AuditHead
	err := s.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(metaAuditHead); len(v) == 8+sha256.Size {
			head = AuditHead{Seq: idFromKey(v[:8]), Hash: hex.EncodeToString(v[8:])}
		}
		return nil
	})
	return head, err
}

// AuditCounts counts the audit log's records, kept in the transactions that
// append them. They start with the file, not with the process.
type AuditCounts struct {
	// Actions is the number of records of each action ("claim", "complete", …).
	Actions map[string]uint64
	// Reclaimed counts claims that took a job whose lease had expired.
	Reclaimed uint64
	// ExpiredDead counts jobs that went dead because their lease expired
	// with no attempts left.
	ExpiredDead uint64
}

// AuditCounts returns the audit record counters. A file opened read-only
// that predates them reports none.
func (s *Store) AuditCounts(ctx context.Context) (AuditCounts, error) {
	out := AuditCounts{Actions: map[string]uint64{}}
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAuditCounts)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: audit count %q", ErrCorrupt, k)
			}
			switch n := idFromKey(v); string(k) {
			case auditCountReclaimed:
				out.Reclaimed = n
			case auditCountExpiredDead:
				out.ExpiredDead = n
			default:
				out.Actions[string(k)] = n
			}
			return nil
		})
	})
	return out, err
}

// sealAudit sets rec.Hash and returns the stored encoding of rec. It
// encodes the record once: the stored map is the hashed map (rec without
// its hash) with the "hash" key appended, the last field, so it is that
// encoding with its map length one higher and the key and value after it —
// the bytes encodeRecord gives for rec with its hash set (a test holds it
// to that). An audit record has at most 9 keys, so its map header is one
// byte (fixmap) either way.
func sealAudit(rec *auditRecord) ([]byte, error) {
	c := *rec
	c.Hash = nil
	hashed, err := encodeRecord(&c)
	if err != nil {
		return nil, err
	}
	if len(hashed) == 0 || hashed[0]&0xf0 != 0x80 || hashed[0] == 0x8f {
		return nil, fmt.Errorf("db: audit record does not encode as a small map (header %#x)", hashed[:min(1, len(hashed))])
	}
	h := sha256.New()
	h.Write(rec.PrevHash)
	h.Write(hashed)
	rec.Hash = h.Sum(nil)

	buf := bytes.NewBuffer(make([]byte, 0, len(hashed)+48))
	buf.WriteByte(hashed[0] + 1)
	buf.Write(hashed[1:])
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	if err := enc.EncodeString("hash"); err != nil {
		return nil, err
	}
	if err := enc.EncodeBytes(rec.Hash); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
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
			if err := unmarshalRecord(v, &r); err != nil {
				return fmt.Errorf("%w: audit record %d: %v", ErrCorrupt, idFromKey(k), err)
			}
			out = append(out, r.public())
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
		if err := unmarshalRecord(v, &r); err != nil {
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
