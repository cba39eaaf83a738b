package bolt

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fenceq/fenceq/db"
	"github.com/vmihailenco/msgpack/v5"
)

const jobRecordVersion = 1

// jobRecord is the stored form of a job. Tags are short, explicit and never
// reused; times are Unix nanoseconds (0 = unset); JSON values are stored as
// their JSON bytes. Golden files in testdata/records pin the format.
type jobRecord struct {
	V              uint8         `msgpack:"v"`
	ID             uint64        `msgpack:"id"`
	Queue          string        `msgpack:"q"`
	Kind           string        `msgpack:"k,omitempty"`
	Payload        []byte        `msgpack:"p,omitempty"`
	Priority       int64         `msgpack:"pr,omitempty"`
	State          db.State      `msgpack:"s"`
	Attempts       uint64        `msgpack:"a"`
	MaxAttempts    uint64        `msgpack:"ma"`
	Budget         uint64        `msgpack:"bu"` // max_attempts given at enqueue; Retry grants it again
	ClaimedBy      string        `msgpack:"cb,omitempty"`
	LeaseExpiresAt int64         `msgpack:"lx,omitempty"`
	RunAt          int64         `msgpack:"ra"`
	CreatedAt      int64         `msgpack:"ca"`
	UpdatedAt      int64         `msgpack:"ua"`
	CompletedAt    int64         `msgpack:"co,omitempty"`
	LastError      string        `msgpack:"le,omitempty"`
	Errors         []errorRecord `msgpack:"er,omitempty"`
	Result         []byte        `msgpack:"r,omitempty"`
	Attestation    []byte        `msgpack:"at,omitempty"`
	IdempotencyKey string        `msgpack:"ik,omitempty"`
}

type errorRecord struct {
	Attempt uint64 `msgpack:"a"`
	At      int64  `msgpack:"t"`
	Error   string `msgpack:"e"`
}

func encodeRecord(v any) ([]byte, error) {
	// The bytes go to bbolt, which keeps them until the commit: each record
	// gets its own buffer; only the encoder is pooled.
	buf := bytes.NewBuffer(make([]byte, 0, 256))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unmarshalRecord decodes a stored msgpack value. msgpack v5.4.1 allocates
// a slice or map as large as its header claims (its allocation limit check
// is inverted), so a corrupt header of a few bytes could ask for gigabytes.
// Skip walks the value without allocating and fails at the end of b, so
// after it every claimed length is bounded by len(b).
func unmarshalRecord(b []byte, v any) error {
	if err := decodeWith(b, (*msgpack.Decoder).Skip); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}

// decodeWith runs decode on a pooled decoder reading b.
func decodeWith(b []byte, decode func(*msgpack.Decoder) error) error {
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	var rd bytes.Reader
	rd.Reset(b)
	dec.Reset(&rd)
	return decode(dec)
}

func decodeJob(b []byte) (*jobRecord, error) {
	// jobRecord decodes itself and bounds its allocations (DecodeMsgpack),
	// so the walk unmarshalRecord makes first is not needed here.
	var r jobRecord
	if err := decodeWith(b, r.DecodeMsgpack); err != nil {
		return nil, fmt.Errorf("%w: job: %v", db.ErrCorrupt, err)
	}
	if r.V == 0 || r.V > jobRecordVersion || r.ID == 0 || !db.ValidState(r.State) {
		return nil, fmt.Errorf("%w: job %d: version %d, state %q", db.ErrCorrupt, r.ID, r.V, r.State)
	}
	return &r, nil
}

// clone returns a deep enough copy for a before/after pair: slices that
// putJob or callers modify are copied.
func (r *jobRecord) clone() *jobRecord {
	c := *r
	c.Errors = append([]errorRecord(nil), r.Errors...)
	return &c
}

func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

func (r *jobRecord) job() db.Job {
	j := db.Job{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: rawJSON(r.Payload),
		Priority: r.Priority, State: r.State, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		ClaimedBy: r.ClaimedBy, LeaseExpiresAt: db.FromUnixNano(r.LeaseExpiresAt),
		RunAt: db.FromUnixNano(r.RunAt), CreatedAt: db.FromUnixNano(r.CreatedAt),
		UpdatedAt: db.FromUnixNano(r.UpdatedAt), CompletedAt: db.FromUnixNano(r.CompletedAt),
		LastError: r.LastError, Result: rawJSON(r.Result), Attestation: rawJSON(r.Attestation),
		IdempotencyKey: r.IdempotencyKey,
	}
	for _, e := range r.Errors {
		j.Errors = append(j.Errors, db.JobError{Attempt: e.Attempt, At: db.FromUnixNano(e.At), Error: e.Error})
	}
	return j
}
