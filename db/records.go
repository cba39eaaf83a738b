package db

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// State is a job's place in its life cycle.
type State string

// Job states. A job is created available or scheduled, is claimed, and ends
// completed, dead or cancelled; dead and cancelled jobs can be retried.
const (
	StateAvailable State = "available"
	StateScheduled State = "scheduled"
	StateClaimed   State = "claimed"
	StateCompleted State = "completed"
	StateDead      State = "dead"
	StateCancelled State = "cancelled"
)

// States lists every state in display order.
var States = []State{StateAvailable, StateScheduled, StateClaimed, StateCompleted, StateDead, StateCancelled}

// ValidState reports whether s is one of States.
func ValidState(s State) bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

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
	State          State         `msgpack:"s"`
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

// maxErrorsKept bounds a job's error history.
const maxErrorsKept = 10

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
		return nil, fmt.Errorf("%w: job: %v", ErrCorrupt, err)
	}
	if r.V == 0 || r.V > jobRecordVersion || r.ID == 0 || !ValidState(r.State) {
		return nil, fmt.Errorf("%w: job %d: version %d, state %q", ErrCorrupt, r.ID, r.V, r.State)
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

// Job is a job as callers see it. It holds no memory owned by bbolt.
type Job struct {
	ID             uint64
	Queue          string
	Kind           string
	Payload        json.RawMessage
	Priority       int64
	State          State
	Attempts       uint64
	MaxAttempts    uint64
	ClaimedBy      string
	LeaseExpiresAt time.Time
	RunAt          time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
	LastError      string
	Errors         []JobError
	Result         json.RawMessage
	Attestation    json.RawMessage
	IdempotencyKey string
}

// JobError is one recorded failure of a job.
type JobError struct {
	Attempt uint64
	At      time.Time
	Error   string
}

// FencingToken is the token of the job's current claim, or 0 when it is not
// claimed.
func (j Job) FencingToken() uint64 {
	if j.State != StateClaimed {
		return 0
	}
	return j.Attempts
}

func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

func (r *jobRecord) job() Job {
	j := Job{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: rawJSON(r.Payload),
		Priority: r.Priority, State: r.State, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		ClaimedBy: r.ClaimedBy, LeaseExpiresAt: fromUnixNano(r.LeaseExpiresAt),
		RunAt: fromUnixNano(r.RunAt), CreatedAt: fromUnixNano(r.CreatedAt),
		UpdatedAt: fromUnixNano(r.UpdatedAt), CompletedAt: fromUnixNano(r.CompletedAt),
		LastError: r.LastError, Result: rawJSON(r.Result), Attestation: rawJSON(r.Attestation),
		IdempotencyKey: r.IdempotencyKey,
	}
	for _, e := range r.Errors {
		j.Errors = append(j.Errors, JobError{Attempt: e.Attempt, At: fromUnixNano(e.At), Error: e.Error})
	}
	return j
}
