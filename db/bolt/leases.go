package bolt

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	bbolt "go.etcd.io/bbolt"
)

const leaseRecordVersion = 1

// leaseRecord is the stored form of a named lease, keyed by its name. Tags
// are short, explicit and never reused; times are Unix nanoseconds (0 =
// unset). A record is never deleted, so Token — the last token issued for
// the name — only grows, across release, expiry and restarts.
type leaseRecord struct {
	V          uint8  `msgpack:"v"`
	Holder     string `msgpack:"h,omitempty"`  // principal|label; "" after release
	Token      uint64 `msgpack:"t"`            // last token issued
	ExpiresAt  int64  `msgpack:"x,omitempty"`  // 0 after release
	AcquiredAt int64  `msgpack:"aa,omitempty"` // when Token was issued
	UpdatedAt  int64  `msgpack:"ua"`
}

func (r *leaseRecord) rules() *db.LeaseRecord {
	return &db.LeaseRecord{Holder: r.Holder, Token: r.Token, ExpiresAt: r.ExpiresAt, AcquiredAt: r.AcquiredAt, UpdatedAt: r.UpdatedAt}
}

func leaseRecordOf(l db.LeaseRecord) *leaseRecord {
	return &leaseRecord{V: leaseRecordVersion, Holder: l.Holder, Token: l.Token, ExpiresAt: l.ExpiresAt,
		AcquiredAt: l.AcquiredAt, UpdatedAt: l.UpdatedAt}
}

func decodeLease(name string, b []byte) (*leaseRecord, error) {
	var r leaseRecord
	if err := msgrec.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: lease %q: %v", db.ErrCorrupt, name, err)
	}
	if r.V == 0 || r.V > leaseRecordVersion || r.Token == 0 {
		return nil, fmt.Errorf("%w: lease %q: version %d, token %d", db.ErrCorrupt, name, r.V, r.Token)
	}
	return &r, nil
}

// getLease returns the record of name, or nil when the name was never
// acquired. A file from before leases existed, opened read-only, has no
// leases bucket: it has no leases either.
func getLease(tx *bbolt.Tx, name string) (*leaseRecord, error) {
	b := tx.Bucket(bucketLeases)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(name))
	if v == nil {
		return nil, nil
	}
	return decodeLease(name, v)
}

// putLease writes rec under name. It is the only place that writes lease
// records.
func putLease(tx *bbolt.Tx, name string, rec *leaseRecord) error {
	v, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketLeases).Put([]byte(name), v)
}

func (r *leaseRecord) lease(name string, now time.Time) db.Lease { return r.rules().Lease(name, now) }

// AcquireLease gives the lease Name to Principal|Holder for TTL when nobody
// holds it (never acquired, released or expired) and returns it with a new
// fencing token: the name's previous token plus one (db.AcquireLease).
// While it is held and unexpired — also by the same holder name — it is
// refused with CodeConflict, with a message that names the holder and the
// expiry; with Wait it first waits for a release or the expiry, and gives
// that refusal when the wait ends. Other errors: CodeInvalid, an exhausted
// name (CodeConflict), ErrClosed, and ctx's error when ctx ends while waiting.
func (s *Store) AcquireLease(ctx context.Context, req db.AcquireLeaseRequest) (db.Lease, error) {
	holder, ttl, err := s.opts.ValidateAcquire(req)
	if err != nil {
		return db.Lease{}, err
	}
	return s.waits.Acquire(ctx, req.Name, req.Wait, func(ctx context.Context) (db.Lease, bool, time.Duration, error) {
		op := &acquireOp{req: req, holder: holder, ttl: ttl}
		if err := s.update(ctx, op); err != nil {
			if op.heldBy == nil {
				return db.Lease{}, false, 0, err
			}
			// Held: wait for a release, or the holder's expiry by the
			// store's clock, whichever comes first.
			return db.Lease{}, true, db.FromUnixNano(op.heldBy.ExpiresAt).Sub(s.opts.Now()), err
		}
		return op.out, false, 0, nil
	})
}

// leaseOp is an acquire, renew or release: decide loads the record and
// applies the transition; apply writes it with its audit link.
type leaseOp struct {
	name string
	old  *leaseRecord
	next db.LeaseRecord
	ev   db.AuditEvent
	out  db.Lease
}

func (op *leaseOp) write(w *writer) error {
	rec := leaseRecordOf(op.next)
	if err := w.putLease(op.name, rec); err != nil {
		return err
	}
	op.out = rec.lease(op.name, w.now)
	return w.audit(op.ev)
}

type acquireOp struct {
	leaseOp
	req    db.AcquireLeaseRequest
	holder string
	ttl    time.Duration
	heldBy *leaseRecord // the record as it is, when refused because it is held
}

func (op *acquireOp) decide(r reader, now time.Time) error {
	old, err := r.lease(op.req.Name)
	if err != nil {
		return err
	}
	var cur *db.LeaseRecord
	if old != nil {
		cur = old.rules()
	}
	op.name, op.old = op.req.Name, old
	op.next, op.ev, err = db.AcquireLease(cur, op.req, op.holder, op.ttl, now)
	if err != nil && old != nil && old.rules().Named().Held(now) {
		op.heldBy = old
	}
	return err
}

func (op *acquireOp) apply(w *writer, _ int) (bool, error) { return false, op.write(w) }

type renewOp struct {
	leaseOp
	req    db.RenewLeaseRequest
	holder string
	ttl    time.Duration
}

func (op *renewOp) decide(r reader, now time.Time) error {
	old, err := heldLease(r.tx, op.req.Name)
	if err != nil {
		return err
	}
	op.name, op.old = op.req.Name, old
	op.next, op.ev, err = db.RenewLease(old.rules(), op.req, op.holder, op.ttl, now)
	return err
}

func (op *renewOp) apply(w *writer, _ int) (bool, error) { return false, op.write(w) }

type releaseOp struct {
	leaseOp
	req    db.ReleaseLeaseRequest
	holder string
}

func (op *releaseOp) decide(r reader, now time.Time) error {
	old, err := heldLease(r.tx, op.req.Name)
	if err != nil {
		return err
	}
	op.name, op.old = op.req.Name, old
	op.next, op.ev, err = db.ReleaseLease(old.rules(), op.req, op.holder, now)
	return err
}

func (op *releaseOp) apply(w *writer, _ int) (bool, error) {
	w.released = append(w.released, op.name) // waiting acquires are woken after the commit
	return false, op.write(w)
}

// RenewLease extends the caller's lease to now+TTL (db.RenewLease). The
// caller must hold the current token and the lease must not have expired:
// an expired lease is acquired again, with a new token. A refused renew
// changes nothing: CodeConflict (another holder, stale token, released,
// expired) or CodeNotFound; a missing or impossible token is CodeInvalid.
func (s *Store) RenewLease(ctx context.Context, req db.RenewLeaseRequest) (db.Lease, error) {
	holder, ttl, err := s.opts.ValidateRenew(req)
	if err != nil {
		return db.Lease{}, err
	}
	op := &renewOp{req: req, holder: holder, ttl: ttl}
	if err := s.update(ctx, op); err != nil {
		return db.Lease{}, err
	}
	return op.out, nil
}

// ReleaseLease frees the caller's lease so that the next acquire succeeds
// at once (with a larger token); waiting acquires are woken after the
// commit. The record stays with its token. A release after the lease
// expired, before anybody acquired it again, is accepted. A refused release
// changes nothing: CodeConflict or CodeNotFound; a missing or impossible
// token is CodeInvalid.
func (s *Store) ReleaseLease(ctx context.Context, req db.ReleaseLeaseRequest) (db.Lease, error) {
	holder, err := s.opts.ValidateRelease(req)
	if err != nil {
		return db.Lease{}, err
	}
	op := &releaseOp{req: req, holder: holder}
	if err := s.update(ctx, op); err != nil {
		return db.Lease{}, err
	}
	return op.out, nil
}

// heldLease loads the record a renew or release acts on.
func heldLease(tx *bbolt.Tx, name string) (*leaseRecord, error) {
	rec, err := getLease(tx, name)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, db.LeaseNotFound(name)
	}
	return rec, nil
}

// CheckLease answers whether token is the current, unexpired token of the
// lease name: the question a resource guarded by the lease asks before it
// accepts a write. It returns the lease when it is, CodeConflict (with the
// reason: stale, released or expired) when it is not, CodeNotFound when
// the name was never acquired, and CodeInvalid for a token of zero
// or above 4294967295. It reads; it changes nothing.
func (s *Store) CheckLease(ctx context.Context, name string, token uint64) (db.Lease, error) {
	if err := db.ValidateLeaseName(name); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseToken(token); err != nil {
		return db.Lease{}, err
	}
	var out db.Lease
	err := s.view(func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		rec, err := heldLease(tx, name)
		if err != nil {
			return err
		}
		if err := db.CheckLeaseToken(rec.rules(), name, token, now); err != nil {
			return err
		}
		out = rec.lease(name, now)
		return nil
	})
	if err != nil {
		return db.Lease{}, err
	}
	return out, nil
}

// GetLease returns the lease name, or CodeNotFound when it was never
// acquired.
func (s *Store) GetLease(ctx context.Context, name string) (db.Lease, error) {
	if err := db.ValidateLeaseName(name); err != nil {
		return db.Lease{}, err
	}
	var out db.Lease
	err := s.view(func(tx *bbolt.Tx) error {
		rec, err := heldLease(tx, name)
		if err != nil {
			return err
		}
		out = rec.lease(name, s.opts.Now())
		return nil
	})
	if err != nil {
		return db.Lease{}, err
	}
	return out, nil
}

// ListLeases returns the leases matching req in name order, released and
// expired ones included (their tokens are what the next acquire builds on).
// It returns CodeInvalid for a limit outside 1..MaxListLimit.
func (s *Store) ListLeases(ctx context.Context, req db.ListLeasesRequest) (db.LeasePage, error) {
	var err error
	if req.Limit, err = db.ListLimit(req.Limit); err != nil {
		return db.LeasePage{}, err
	}
	page := db.LeasePage{Leases: []db.Lease{}}
	err = s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketLeases)
		if b == nil {
			return nil
		}
		now := s.opts.Now()
		prefix := []byte(req.Prefix)
		c := b.Cursor()
		k, v := c.Seek(prefix)
		if req.After != "" && req.After > req.Prefix {
			k, v = c.Seek([]byte(req.After))
			if k != nil && string(k) == req.After {
				k, v = c.Next()
			}
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(page.Leases) == req.Limit {
				page.Next = page.Leases[len(page.Leases)-1].Name
				return nil
			}
			name := string(k)
			rec, err := decodeLease(name, v)
			if err != nil {
				return err
			}
			page.Leases = append(page.Leases, rec.lease(name, now))
		}
		return nil
	})
	if err != nil {
		return db.LeasePage{}, err
	}
	return page, nil
}

// CheckJob answers whether token is job id's current claim: the job is
// claimed and its attempts equal token. A downstream service a worker
// writes to asks it to verify that the worker still holds the job. Like a
// heartbeat, a claim whose lease expired is current until the job is
// claimed again. It returns the job when the token is current,
// CodeConflict when it is not, CodeNotFound, and CodeInvalid for
// a token of zero or above 4294967295. It reads; it changes nothing.
func (s *Store) CheckJob(ctx context.Context, id, token uint64) (db.Job, error) {
	if err := db.ValidateLeaseToken(token); err != nil {
		return db.Job{}, err
	}
	var job db.Job
	err := s.view(func(tx *bbolt.Tx) error {
		rec, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if err := db.CheckJobToken(&rec.JobRecord, token); err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	if err != nil {
		return db.Job{}, err
	}
	return job, nil
}
