package bolt

// What the status page shows besides the jobs (db/observe.go): refused
// fenced calls and the workers heard from, each a bounded set of records
// in buckets of their own (schema version 6), and the oldest available job
// of each queue, read from the claim index. Recording an observation
// writes no job, no index entry of a job and no audit link.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	bbolt "go.etcd.io/bbolt"
)

const (
	refusedRecordVersion = 1
	workerRecordVersion  = 1
)

// refusedRecord is the stored form of a refused call, keyed by its
// sequence (the refused bucket's own, bbolt's NextSequence). Tags are
// short, explicit and never reused; times are Unix nanoseconds.
type refusedRecord struct {
	V         uint8  `msgpack:"v"`
	At        int64  `msgpack:"t"`
	Principal string `msgpack:"p,omitempty"`
	Worker    string `msgpack:"w,omitempty"`
	Job       uint64 `msgpack:"j"`
	Operation string `msgpack:"o"`
	TokenSent uint64 `msgpack:"ts,omitempty"`
	Code      string `msgpack:"c,omitempty"`
	Message   string `msgpack:"m,omitempty"`
}

// workerRecord is the stored form of a worker, keyed by workerKey.
type workerRecord struct {
	V             uint8  `msgpack:"v"`
	Principal     string `msgpack:"p,omitempty"`
	Worker        string `msgpack:"w"`
	Claims        uint64 `msgpack:"n,omitempty"`
	FirstSeen     int64  `msgpack:"fs"`
	LastSeen      int64  `msgpack:"ls"`
	LastClaim     int64  `msgpack:"lc,omitempty"`
	LastHeartbeat int64  `msgpack:"lh,omitempty"`
}

func decodeRefused(seq uint64, b []byte) (db.RefusedCall, error) {
	var r refusedRecord
	if err := msgrec.Unmarshal(b, &r); err != nil {
		return db.RefusedCall{}, fmt.Errorf("%w: refused call %d: %v", db.ErrCorrupt, seq, err)
	}
	if r.V == 0 || r.V > refusedRecordVersion || r.At == 0 {
		return db.RefusedCall{}, fmt.Errorf("%w: refused call %d: version %d, at %d", db.ErrCorrupt, seq, r.V, r.At)
	}
	return db.RefusedCall{Seq: seq, At: db.FromUnixNano(r.At), Principal: r.Principal, Worker: r.Worker,
		Job: r.Job, Operation: r.Operation, TokenSent: r.TokenSent, Code: r.Code, Message: r.Message}, nil
}

func decodeWorker(b []byte) (db.Worker, error) {
	var r workerRecord
	if err := msgrec.Unmarshal(b, &r); err != nil {
		return db.Worker{}, fmt.Errorf("%w: worker: %v", db.ErrCorrupt, err)
	}
	if r.V == 0 || r.V > workerRecordVersion || r.LastSeen == 0 {
		return db.Worker{}, fmt.Errorf("%w: worker %q: version %d, last seen %d", db.ErrCorrupt, r.Worker, r.V, r.LastSeen)
	}
	return db.Worker{Principal: r.Principal, Worker: r.Worker, Claims: r.Claims,
		FirstSeen: db.FromUnixNano(r.FirstSeen), LastSeen: db.FromUnixNano(r.LastSeen),
		LastClaim: db.FromUnixNano(r.LastClaim), LastHeartbeat: db.FromUnixNano(r.LastHeartbeat)}, nil
}

// workerKey is len(principal) (2 bytes) ‖ principal ‖ worker: a principal
// holding any byte cannot run into its worker label.
func workerKey(principal, worker string) []byte {
	k := make([]byte, 0, 2+len(principal)+len(worker))
	k = binary.BigEndian.AppendUint16(k, uint16(len(principal)))
	return append(append(k, principal...), worker...)
}

// workerSeenKey is lastSeen ‖ workerKey: bucketWorkersSeen in the order of
// the time each worker was last heard from.
func workerSeenKey(lastSeen int64, wk []byte) []byte {
	k := make([]byte, 0, 8+len(wk))
	k = binary.BigEndian.AppendUint64(k, sortableTime(lastSeen))
	return append(k, wk...)
}

func refusedJobKey(job, seq uint64) []byte {
	k := make([]byte, 0, 16)
	k = binary.BigEndian.AppendUint64(k, job)
	return binary.BigEndian.AppendUint64(k, seq)
}

// RecordRefusedCalls keeps calls in one transaction (see db.Store); the
// oldest beyond db.MaxRefusedCalls are removed in it.
func (s *Store) RecordRefusedCalls(ctx context.Context, calls []db.RefusedCall) error {
	calls = append([]db.RefusedCall(nil), calls...)
	if err := db.NormalizeRefusedCalls(calls); err != nil {
		return err
	}
	return s.updateItems(ctx, 2*len(calls), &refusedOp{calls: calls})
}

// refusedOp writes refused calls: nothing to decide beyond the validation
// done before it was sent.
type refusedOp struct{ calls []db.RefusedCall }

func (op *refusedOp) decide(reader, time.Time) error { return nil }

func (op *refusedOp) apply(w *writer, _ int) (bool, error) {
	b, idx := w.tx.Bucket(bucketRefused), w.tx.Bucket(bucketRefusedJob)
	for _, c := range op.calls {
		seq, err := b.NextSequence()
		if err != nil {
			return false, err
		}
		at := c.At.UnixNano()
		if c.At.IsZero() {
			at = w.now.UnixNano()
		}
		v, err := encodeRecord(&refusedRecord{V: refusedRecordVersion, At: at, Principal: c.Principal, Worker: c.Worker,
			Job: c.Job, Operation: c.Operation, TokenSent: c.TokenSent, Code: c.Code, Message: c.Message})
		if err != nil {
			return false, err
		}
		if err := b.Put(u64(seq), v); err != nil {
			return false, err
		}
		if err := idx.Put(refusedJobKey(c.Job, seq), nil); err != nil {
			return false, err
		}
	}
	// Sequences are given one by one and removed only from the front, so
	// the bucket holds every sequence from its first key to its last.
	last := b.Sequence()
	cur := b.Cursor()
	for k, v := cur.First(); k != nil && last-idFromKey(k)+1 > db.MaxRefusedCalls; k, v = cur.First() {
		seq := idFromKey(k)
		c, err := decodeRefused(seq, v)
		if err != nil {
			return false, err
		}
		if err := idx.Delete(refusedJobKey(c.Job, seq)); err != nil {
			return false, err
		}
		if err := b.Delete(k); err != nil {
			return false, err
		}
	}
	return false, nil
}

// ListRefusedCalls returns the newest refused calls first (see db.Store),
// in one read transaction.
func (s *Store) ListRefusedCalls(ctx context.Context, req db.RefusedCallsRequest) ([]db.RefusedCall, error) {
	limit, err := db.ListLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	out := []db.RefusedCall{}
	err = s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketRefused)
		if b == nil { // a file of schema version 4 opened read-only
			return nil
		}
		get := func(seq uint64) error {
			v := b.Get(u64(seq))
			if v == nil {
				return fmt.Errorf("%w: the refused-call index points at %d, which has no record", db.ErrCorrupt, seq)
			}
			c, err := decodeRefused(seq, v)
			out = append(out, c)
			return err
		}
		if req.Job == 0 {
			cur := b.Cursor()
			for k, v := cur.Last(); k != nil && len(out) < limit; k, v = cur.Prev() {
				c, err := decodeRefused(idFromKey(k), v)
				if err != nil {
					return err
				}
				out = append(out, c)
			}
			return nil
		}
		prefix := u64(req.Job)
		cur := tx.Bucket(bucketRefusedJob).Cursor()
		// Seek past the job's last key (no sequence is MaxUint64), then back.
		k, _ := cur.Seek(refusedJobKey(req.Job, math.MaxUint64))
		if k == nil {
			k, _ = cur.Last()
		} else {
			k, _ = cur.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, _ = cur.Prev() {
			if err := get(idFromKey(k)); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// RecordWorkers merges sightings into the workers' records in one
// transaction and prunes them (see db.Store).
func (s *Store) RecordWorkers(ctx context.Context, sightings []db.WorkerSighting) error {
	ss, err := db.NormalizeWorkerSightings(sightings)
	if err != nil {
		return err
	}
	return s.updateItems(ctx, 2*len(ss), &workersOp{sightings: ss})
}

type workersOp struct{ sightings []db.WorkerSighting }

func (op *workersOp) decide(reader, time.Time) error { return nil }

func (op *workersOp) apply(w *writer, _ int) (bool, error) {
	b, seen := w.tx.Bucket(bucketWorkers), w.tx.Bucket(bucketWorkersSeen)
	n := b.Sequence() // the number of workers kept
	for _, s := range op.sightings {
		k := workerKey(s.Principal, s.Worker)
		var old *db.Worker
		if v := b.Get(k); v != nil {
			o, err := decodeWorker(v)
			if err != nil {
				return false, err
			}
			old = &o
			if err := seen.Delete(workerSeenKey(o.LastSeen.UnixNano(), k)); err != nil {
				return false, err
			}
		} else {
			n++
		}
		m := db.MergeWorker(old, s)
		v, err := encodeRecord(&workerRecord{V: workerRecordVersion, Principal: m.Principal, Worker: m.Worker,
			Claims: m.Claims, FirstSeen: m.FirstSeen.UnixNano(), LastSeen: m.LastSeen.UnixNano(),
			LastClaim: unixNano(m.LastClaim), LastHeartbeat: unixNano(m.LastHeartbeat)})
		if err != nil {
			return false, err
		}
		if err := b.Put(k, v); err != nil {
			return false, err
		}
		if err := seen.Put(workerSeenKey(m.LastSeen.UnixNano(), k), nil); err != nil {
			return false, err
		}
	}
	// Prune: the workers heard from longest ago, while too many are kept
	// or they are past the retention.
	cur := seen.Cursor()
	for k, _ := cur.First(); k != nil; k, _ = cur.First() {
		if n <= db.MaxWorkersKept && !db.WorkerExpired(db.FromUnixNano(timeFromKey(k, 0)), w.now) {
			break
		}
		if err := b.Delete(k[8:]); err != nil {
			return false, err
		}
		if err := seen.Delete(k); err != nil {
			return false, err
		}
		n--
	}
	return false, b.SetSequence(n)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// ListWorkers returns the workers heard from most recently first, in one
// read transaction.
func (s *Store) ListWorkers(ctx context.Context, req db.WorkersRequest) ([]db.Worker, error) {
	limit, err := db.ListLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	out := []db.Worker{}
	err = s.view(func(tx *bbolt.Tx) error {
		seen, b := tx.Bucket(bucketWorkersSeen), tx.Bucket(bucketWorkers)
		if seen == nil {
			return nil
		}
		cur := seen.Cursor()
		for k, _ := cur.Last(); k != nil && len(out) < limit; k, _ = cur.Prev() {
			v := b.Get(k[8:])
			if v == nil {
				return fmt.Errorf("%w: the worker index points at a worker without a record", db.ErrCorrupt)
			}
			wk, err := decodeWorker(v)
			if err != nil {
				return err
			}
			out = append(out, wk)
		}
		return nil
	})
	return out, err
}

// QueueWaiting returns the oldest available job of every queue that has
// one (see db.Store). The claim index orders a queue's jobs by priority,
// then run_at: the first key of each priority level is that level's
// oldest, so one seek per level finds it, for at most
// db.MaxWaitingPriorities levels.
func (s *Store) QueueWaiting(ctx context.Context) ([]db.QueueWaiting, error) {
	out := []db.QueueWaiting{}
	err := s.view(func(tx *bbolt.Tx) error {
		ready := tx.Bucket(bucketReady).Cursor()
		counts := tx.Bucket(bucketCounts).Cursor()
		for k, _ := counts.First(); k != nil; k, _ = counts.Next() {
			i := bytes.IndexByte(k, 0)
			if i < 0 || db.State(k[i+1:]) != db.StateAvailable {
				continue
			}
			prefix := k[:i+1]
			var best db.QueueWaiting
			seek := bytes.Clone(prefix)
			for level := 0; level < db.MaxWaitingPriorities; level++ {
				rk, _ := ready.Seek(seek)
				if rk == nil || !bytes.HasPrefix(rk, prefix) || len(rk) != len(prefix)+24 {
					break
				}
				runAt := timeFromKey(rk, len(prefix)+8)
				id, since := idFromKey(rk), best.Since.UnixNano()
				if best.Job == 0 || runAt < since || (runAt == since && id < best.Job) { // ties: the lower id, as PostgreSQL's
					best = db.QueueWaiting{Queue: string(prefix[:i]), Job: id, Since: db.FromUnixNano(runAt)}
				}
				p := binary.BigEndian.Uint64(rk[len(prefix):])
				if p == math.MaxUint64 {
					break
				}
				seek = binary.BigEndian.AppendUint64(bytes.Clone(prefix), p+1)
			}
			if best.Job != 0 {
				out = append(out, best)
			}
		}
		return nil
	})
	return out, err
}
