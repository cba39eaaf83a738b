package db

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/fenceq/fenceq/internal/msgrec"
	"github.com/vmihailenco/msgpack/v5"
)

// AuditEvent is what a state transition says about its change. An engine
// appends it to the audit chain in the transaction of the change.
type AuditEvent struct {
	Principal string
	Action    string
	Job       uint64 // subject "job:<id>" when set
	Subject   string // otherwise, e.g. "lease:<name>"
	Token     uint64
	Details   map[string]string
}

// SubjectName is the event's audit subject.
func (e *AuditEvent) SubjectName() string {
	if e.Job != 0 {
		return JobSubject(e.Job)
	}
	return e.Subject
}

// AuditLink is one link of the audit chain, the same in every engine. Its
// hash is SHA-256(prev_hash ‖ msgpack(link with hash omitted)), where the
// msgpack encoding is a map of the fields below in declaration order,
// details with sorted keys, times as Unix nanoseconds. Field names are the
// map keys; they are never renamed. A chain copied from one engine to
// another verifies there too.
type AuditLink struct {
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

// NextAuditLink is the link that follows (prevSeq, prevHash) for e at now,
// not yet sealed. prevHash is nil for the first link (all zeros).
func NextAuditLink(prevSeq uint64, prevHash []byte, now time.Time, e AuditEvent) AuditLink {
	prev := make([]byte, sha256.Size)
	copy(prev, prevHash)
	return AuditLink{Seq: prevSeq + 1, Time: now.UnixNano(), Principal: e.Principal, Action: e.Action,
		Subject: e.SubjectName(), Token: e.Token, Details: e.Details, PrevHash: prev}
}

// Seal sets l.Hash and returns the canonical encoding of l with its hash,
// the bytes an engine stores. It encodes the link once: the stored map is
// the hashed map (l without its hash) with the "hash" key appended, the
// last field, so it is that encoding with its map length one higher and the
// key and value after it (a test holds it to the reflective encoding). A
// link has at most 9 keys, so its map header is one byte (fixmap) either way.
func (l *AuditLink) Seal() ([]byte, error) {
	c := *l
	c.Hash = nil
	hashed, err := encodeLink(&c)
	if err != nil {
		return nil, err
	}
	if len(hashed) == 0 || hashed[0]&0xf0 != 0x80 || hashed[0] == 0x8f {
		return nil, fmt.Errorf("db: audit record does not encode as a small map (header %#x)", hashed[:min(1, len(hashed))])
	}
	h := sha256.New()
	h.Write(l.PrevHash)
	h.Write(hashed)
	l.Hash = h.Sum(nil)

	buf := bytes.NewBuffer(make([]byte, 0, len(hashed)+48))
	buf.WriteByte(hashed[0] + 1)
	buf.Write(hashed[1:])
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	if err := enc.EncodeString("hash"); err != nil {
		return nil, err
	}
	if err := enc.EncodeBytes(l.Hash); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ComputeHash computes SHA-256(prev_hash ‖ msgpack(link without hash)).
func (l *AuditLink) ComputeHash() ([]byte, error) {
	c := *l
	c.Hash = nil
	b, err := encodeLink(&c)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(l.PrevHash)
	h.Write(b)
	return h.Sum(nil), nil
}

func encodeLink(l *AuditLink) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, 256))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	if err := l.EncodeMsgpack(enc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeAuditLink decodes a stored link. It returns an error wrapping
// ErrCorrupt when b is not one.
func DecodeAuditLink(b []byte) (AuditLink, error) {
	l, err := decodeLink(b)
	if err != nil {
		return l, fmt.Errorf("%w: audit record: %v", ErrCorrupt, err)
	}
	return l, nil
}

func decodeLink(b []byte) (AuditLink, error) {
	var l AuditLink
	return l, msgrec.Unmarshal(b, &l)
}

// Record is the link as callers see it.
func (l *AuditLink) Record() AuditRecord {
	return AuditRecord{Seq: l.Seq, Time: FromUnixNano(l.Time), Principal: l.Principal,
		Action: l.Action, Subject: l.Subject, Token: l.Token, Details: l.Details,
		PrevHash: hex.EncodeToString(l.PrevHash), Hash: hex.EncodeToString(l.Hash)}
}

// EncodeMsgpack implements msgpack.CustomEncoder for the link an audit hash
// covers (see Seal): the reflective codec's bytes with sorted details,
// which TestAuditLinkEncodingMatchesReflection holds it to. It sorts
// whatever the encoder's settings, so the hash never depends on them.
func (l *AuditLink) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := msgrec.NewWriter(enc)
	l.fields(&w)
	if w.StartWriting() {
		l.fields(&w)
	}
	return w.Err()
}

func (l *AuditLink) fields(w *msgrec.Writer) {
	msgrec.Field(w, "seq", l.Seq, msgrec.Uint64)
	msgrec.Field(w, "time", l.Time, msgrec.Int64)
	msgrec.Field(w, "principal", l.Principal, msgrec.String)
	msgrec.Field(w, "action", l.Action, msgrec.String)
	msgrec.Field(w, "subject", l.Subject, msgrec.String)
	msgrec.Field(w, "token", l.Token, msgrec.Uint64)
	if len(l.Details) > 0 {
		msgrec.Field(w, "details", l.Details, encodeSortedDetails)
	}
	msgrec.Field(w, "prev_hash", l.PrevHash, msgrec.Bytes)
	if len(l.Hash) > 0 {
		msgrec.Field(w, "hash", l.Hash, msgrec.Bytes)
	}
}

// sortedDetails lists a details map's entries in key order.
type sortedDetails struct {
	keys []string
	m    map[string]string
}

func encodeSortedDetails(enc *msgpack.Encoder, details map[string]string) error {
	d := sortedDetails{keys: slices.Sorted(maps.Keys(details)), m: details}
	w := msgrec.NewWriter(enc)
	d.fields(&w)
	if w.StartWriting() {
		d.fields(&w)
	}
	return w.Err()
}

func (d *sortedDetails) fields(w *msgrec.Writer) {
	for _, k := range d.keys {
		msgrec.Field(w, k, d.m[k], msgrec.String)
	}
}

// AuditMark is one link of the chain, named by its sequence and hash: where
// a verification stopped, or the checkpoint left by the records archived
// and removed before it. The zero mark is the start of a chain from which
// nothing was removed (its first record's prev_hash is all zeros).
type AuditMark struct {
	Seq  uint64
	Hash []byte
}

// ChainVerifier walks an audit chain in sequence order, the same check in
// every engine: Start at the mark the walk continues from (none: the first
// record), Add each stored link, then Report with the head the engine
// recorded (or ReportSoFar for a walk that may stop short of it).
type ChainVerifier struct {
	rep     AuditReport
	prev    []byte
	want    uint64
	done    bool
	started bool
}

// Start makes the walk continue after from: the next link must be
// from.Seq+1 with prev_hash from.Hash. Call it before the first Add; a
// verifier that is not started starts at the zero mark.
func (v *ChainVerifier) Start(from AuditMark) {
	v.started = true
	v.want = from.Seq + 1
	v.prev = make([]byte, sha256.Size)
	copy(v.prev, from.Hash)
	v.rep.StartSeq = from.Seq
	if from.Seq > 0 {
		v.rep.StartHash = hex.EncodeToString(v.prev)
	}
}

// Verified is the last link that checked out (the start when none did).
func (v *ChainVerifier) Verified() AuditMark {
	if !v.started {
		v.Start(AuditMark{})
	}
	return AuditMark{Seq: v.want - 1, Hash: bytes.Clone(v.prev)}
}

// Add checks the next stored link (key is the sequence it is stored
// under). It returns false once the chain is broken; Report says where.
func (v *ChainVerifier) Add(key uint64, stored []byte) bool {
	if v.done {
		return false
	}
	if !v.started {
		v.Start(AuditMark{})
	}
	v.rep.Records++
	broken := func(format string, args ...any) bool {
		v.rep.FirstBroken, v.rep.Reason, v.done = v.want, fmt.Sprintf(format, args...), true
		return false
	}
	if key != v.want {
		return broken("record %d is missing (found %d)", v.want, key)
	}
	l, err := decodeLink(stored)
	if err != nil {
		return broken("record %d does not decode: %v", v.want, err)
	}
	if l.Seq != v.want {
		return broken("record %d says it is %d", v.want, l.Seq)
	}
	if !bytes.Equal(l.PrevHash, v.prev) {
		return broken("record %d: prev_hash does not match record %d's hash", v.want, v.want-1)
	}
	if h, err := l.ComputeHash(); err != nil || !bytes.Equal(h, l.Hash) {
		return broken("record %d: hash does not match its contents", v.want)
	}
	v.prev = l.Hash
	v.want++
	return true
}

// Report ends a walk that went to the end of the stored chain, against the
// head the engine recorded (seq 0 and a nil hash for an empty log).
func (v *ChainVerifier) Report(headSeq uint64, headHash []byte) AuditReport {
	return v.report(headSeq, headHash, false)
}

// ReportSoFar ends a walk that may have stopped before the head (a bounded
// step of an incremental verification): it is OK when nothing it walked is
// broken and it did not pass the head; VerifiedSeq says how far it got.
func (v *ChainVerifier) ReportSoFar(headSeq uint64, headHash []byte) AuditReport {
	return v.report(headSeq, headHash, true)
}

func (v *ChainVerifier) report(headSeq uint64, headHash []byte, soFar bool) AuditReport {
	end := v.Verified()
	rep := v.rep
	rep.HeadSeq = headSeq
	if headHash != nil {
		rep.HeadHash = hex.EncodeToString(headHash)
	}
	rep.VerifiedSeq = end.Seq
	if end.Seq > 0 {
		rep.VerifiedHash = hex.EncodeToString(end.Hash)
	}
	if v.done {
		return rep
	}
	short := end.Seq < headSeq && !soFar
	if short || end.Seq > headSeq || (end.Seq == headSeq && headSeq > 0 && rep.VerifiedHash != rep.HeadHash) {
		rep.FirstBroken = min(end.Seq, headSeq) + 1
		rep.Reason = fmt.Sprintf("chain ends at %d but the head says %d", end.Seq, headSeq)
		if end.Seq == headSeq {
			rep.FirstBroken = headSeq
			rep.Reason = fmt.Sprintf("record %d does not have the hash the head records", headSeq)
		}
		return rep
	}
	rep.OK = true
	return rep
}

// JobSubject is the audit subject of job id ("job:<id>").
func JobSubject(id uint64) string { return "job:" + strconv.FormatUint(id, 10) }

// LeaseSubject is the audit subject of the named lease ("lease:<name>").
func LeaseSubject(name string) string { return "lease:" + name }

// SHA256Hex is the hex SHA-256 of b, as audit details quote attestations.
func SHA256Hex(b []byte) string {
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

// AuditSubjectRequest pages backwards through the audit records of one
// subject: a job ("job:<id>", see JobSubject) or a named lease
// ("lease:<name>").
type AuditSubjectRequest struct {
	Subject string
	Before  uint64 // cursor: records with a lower sequence; 0 starts at the newest
	Limit   int    // 0: DefaultListLimit; at most MaxListLimit
}

// Normalize fills the default limit and refuses, with CodeInvalid, a limit
// outside 1..MaxListLimit or no subject: the same for every engine.
func (req *AuditSubjectRequest) Normalize() error {
	var err error
	if req.Limit, err = ListLimit(req.Limit); err != nil {
		return err
	}
	if req.Subject == "" {
		return Errorf(CodeInvalid, "subject is required")
	}
	return nil
}

// AuditPage is a page of audit records. Next is the cursor for the
// following page (the Before of the next request), 0 when there is none.
type AuditPage struct {
	Records []AuditRecord
	Next    uint64
}

// AuditHead is the newest link of the audit chain, and the checkpoint
// where the stored chain begins.
type AuditHead struct {
	Seq  uint64 // 0 when the log is empty
	Hash string // hex
	// Checkpoint is the last record archived and removed; the zero value
	// when none was.
	Checkpoint AuditCheckpoint
}

// AuditCheckpoint is what the store keeps of the records it removed after
// they were archived (Store.RemoveAudit): the last one's sequence and hash,
// from which the stored chain verifies, its time (every removed record is
// no newer), and when it was removed.
type AuditCheckpoint struct {
	Seq        uint64
	Hash       string    // hex
	Time       time.Time // of record Seq
	ArchivedAt time.Time
}

// Mark is the checkpoint as a mark of the chain.
func (c AuditCheckpoint) Mark() AuditMark {
	h, _ := hex.DecodeString(c.Hash)
	return AuditMark{Seq: c.Seq, Hash: h}
}

// RemoveAuditRequest removes the oldest stored audit records, which the
// caller has archived, through Through (Store.RemoveAudit).
type RemoveAuditRequest struct {
	// Principal is who removes them, named in the audit record of the
	// removal.
	Principal string
	// Through is the last archived record: its sequence and the hash the
	// archive holds, which must be the stored record's.
	Through AuditMark
	// Before is the cut: every record removed must be older (the time of
	// now minus the retention, as the records were archived).
	Before time.Time
	// Limit bounds the records one call removes (one transaction); 0 means
	// DefaultRemoveStep. The caller repeats until the checkpoint reaches
	// Through.Seq.
	Limit int
}

// ArchiveAuditRequest asks for the stored audit records an archive holds
// (Store.ArchiveAudit): those after the checkpoint older than Before, at
// most Limit of them (0: all).
type ArchiveAuditRequest struct {
	Before time.Time
	Limit  uint64
}

// Archives reports whether the archive takes r, the next stored record
// after n taken: it must be older than the cut and within the limit.
func (req ArchiveAuditRequest) Archives(r AuditRecord, n uint64) bool {
	return r.Time.Before(req.Before) && (req.Limit == 0 || n < req.Limit)
}

// DefaultRemoveStep is how many audit records one RemoveAudit call removes
// at most.
const DefaultRemoveStep = 5_000

// Normalize checks a removal request and fills its default limit, the same
// for every engine.
func (req *RemoveAuditRequest) Normalize() error {
	if req.Limit < 0 {
		return Errorf(CodeInvalid, "limit must not be negative")
	}
	if req.Limit == 0 {
		req.Limit = DefaultRemoveStep
	}
	if req.Through.Seq == 0 || len(req.Through.Hash) != sha256.Size {
		return Errorf(CodeInvalid, "the last archived record needs its sequence and its %d-byte hash", sha256.Size)
	}
	return nil
}

// RemoveAuditEvent is the audit record of a removal: it names the records
// removed and the checkpoint left, so that the chain itself says when
// older records were archived.
func RemoveAuditEvent(principal string, from, through uint64, hash []byte) AuditEvent {
	return AuditEvent{Principal: principal, Action: "archive", Subject: "audit",
		Details: map[string]string{"from_seq": strconv.FormatUint(from, 10), "through_seq": strconv.FormatUint(through, 10),
			"through_hash": hex.EncodeToString(hash)}}
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

// Counters of AuditCounts besides the action names: the two ends of an
// expired lease (a claim with reclaimed_from, and a job killed by the claim
// path with "lease expired").
const (
	AuditCountReclaimed   = "expiry:reclaimed"
	AuditCountExpiredDead = "expiry:dead"
)

// AuditCountKeys names the counters a link adds one to.
func AuditCountKeys(l *AuditLink) []string {
	keys := []string{l.Action}
	switch {
	case l.Action == "claim" && l.Details["reclaimed_from"] != "":
		keys = append(keys, AuditCountReclaimed)
	case l.Action == "dead" && l.Principal == "system" && l.Details["error"] == "lease expired":
		keys = append(keys, AuditCountExpiredDead)
	}
	return keys
}

// AuditReport is the result of walking the audit chain.
type AuditReport struct {
	Records  uint64 // records walked
	HeadSeq  uint64 // the head recorded in meta
	HeadHash string // hex
	// StartSeq and StartHash are the link the walk continued from: for a
	// whole walk the checkpoint of the records archived and removed (0 and
	// "" when none were), for an incremental one the mark it was given.
	StartSeq  uint64
	StartHash string // hex
	// VerifiedSeq and VerifiedHash are the last link that checked out
	// (the start when none did): a later walk continues from them.
	VerifiedSeq  uint64
	VerifiedHash string // hex
	OK           bool
	FirstBroken  uint64 // sequence of the first record that does not verify; 0 when OK
	Reason       string
}

// VerifiedMark is the mark a later incremental walk continues from.
func (r AuditReport) VerifiedMark() AuditMark {
	h, _ := hex.DecodeString(r.VerifiedHash)
	return AuditMark{Seq: r.VerifiedSeq, Hash: h}
}

// AuditVerifyRequest asks for one bounded step of an incremental
// verification (Store.VerifyAuditFrom).
type AuditVerifyRequest struct {
	// From is a link verified before (a report's VerifiedMark); the zero
	// mark starts at the beginning of the stored chain. A mark below the
	// checkpoint (its records were archived since) continues from the
	// checkpoint.
	From AuditMark
	// Limit bounds the records walked; 0 means DefaultVerifyStep.
	Limit int
}

// DefaultVerifyStep is the records one step of an incremental verification
// walks when the request does not say: a read transaction of a few
// milliseconds.
const DefaultVerifyStep = 10_000
