package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/lease"
	bbolt "go.etcd.io/bbolt"
)

// minExpiryWait bounds how often a waiting acquire looks again when the
// clock says the holder's lease is about to end (or, with a test clock that
// does not move, has not ended yet).
const minExpiryWait = 10 * time.Millisecond

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

func (r *leaseRecord) named() lease.Named {
	return lease.Named{Holder: r.Holder, Token: r.Token, ExpiresAt: db.FromUnixNano(r.ExpiresAt)}
}

func decodeLease(name string, b []byte) (*leaseRecord, error) {
	var r leaseRecord
	if err := unmarshalRecord(b, &r); err != nil {
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

func (r *leaseRecord) lease(name string, now time.Time) db.Lease {
	return db.Lease{Name: name, Holder: r.Holder, FencingToken: r.Token, Held: r.named().Held(now),
		ExpiresAt: db.FromUnixNano(r.ExpiresAt), AcquiredAt: db.FromUnixNano(r.AcquiredAt), UpdatedAt: db.FromUnixNano(r.UpdatedAt)}
}

// AcquireLease gives the lease Name to Principal|Holder for TTL when nobody
// holds it (never acquired, released or expired) and returns it with a new
// fencing token: the name's previous token plus one. While it is held and
// unexpired — also by the same holder name — it returns ErrLeaseHeld, whose
// message names the holder and the expiry; with Wait it first waits for a
// release or the expiry, and returns ErrLeaseHeld when the wait ends. Other
// errors: ErrInvalidArgument, ErrLeaseExhausted, ErrClosed, and ctx's error
// when ctx ends while waiting.
func (s *Store) AcquireLease(ctx context.Context, req db.AcquireLeaseRequest) (db.Lease, error) {
	if err := db.ValidateLeaseName(req.Name); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseHolder(req.Holder); err != nil {
		return db.Lease{}, err
	}
	ttl, err := s.opts.LeaseTTL(req.TTL)
	if err != nil {
		return db.Lease{}, err
	}
	if req.Wait < 0 || req.Wait > db.MaxLeaseWait {
		return db.Lease{}, db.Errorf(db.CodeInvalid, "wait must be between 0 and %v", db.MaxLeaseWait)
	}
	holder := lease.Holder(req.Principal, req.Holder)
	if req.Wait == 0 {
		l, err := s.acquireLease(ctx, req, holder, ttl)
		if err != nil {
			return db.Lease{}, err
		}
		return l, nil
	}

	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	nw := s.leaseWaiters()
	for {
		// Subscribe before trying, so that a release committed after this
		// attempt looked is not missed.
		changed, unsubscribe := nw.subscribe(req.Name)
		cur, err := s.acquireLease(ctx, req, holder, ttl)
		if err == nil || !cur.Held { // cur is the lease as it is only when it is held by another
			unsubscribe()
			if err != nil {
				return db.Lease{}, err
			}
			return cur, nil
		}
		// Held: wait for a release, or the holder's expiry by the store's
		// clock, whichever comes first.
		expiry := time.NewTimer(max(cur.ExpiresAt.Sub(s.opts.Now()), minExpiryWait))
		var stop error
		select {
		case <-changed:
		case <-expiry.C:
		case <-deadline.C:
			stop = err // still held: the holder and expiry of the last look
		case <-ctx.Done():
			stop = ctx.Err()
		case <-s.closing:
			stop = db.ErrClosed
		}
		expiry.Stop()
		unsubscribe()
		if stop != nil {
			return db.Lease{}, stop
		}
	}
}

// acquireLease is one attempt. With ErrLeaseHeld it also returns the lease
// as it is, so a waiter knows when it ends.
func (s *Store) acquireLease(ctx context.Context, req db.AcquireLeaseRequest, holder string, ttl time.Duration) (db.Lease, error) {
	var out db.Lease
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := getLease(tx, req.Name)
		if err != nil {
			return err
		}
		var cur lease.Named
		if old != nil {
			cur = old.named()
		}
		next, err := lease.Acquire(cur, holder, now, ttl)
		switch {
		case errors.Is(err, lease.ErrHeld):
			out = old.lease(req.Name, now)
			return db.Errorf(db.CodeConflict, "lease is held by %s until %s (lease %q)", old.Holder, rfc3339(db.FromUnixNano(old.ExpiresAt)), req.Name)
		case errors.Is(err, lease.ErrTokensExhausted):
			return db.Errorf(db.CodeConflict, "lease has issued every fencing token: lease %q has issued token %d; use another name", req.Name, cur.Token)
		case err != nil:
			return db.Errorf(db.CodeInvalid, "%v", err)
		}
		rec := &leaseRecord{V: leaseRecordVersion, Holder: next.Holder, Token: next.Token,
			ExpiresAt: next.ExpiresAt.UnixNano(), AcquiredAt: now.UnixNano(), UpdatedAt: now.UnixNano()}
		if err := putLease(tx, req.Name, rec); err != nil {
			return err
		}
		out = rec.lease(req.Name, now)
		details := map[string]string{"holder": holder, "expires_at": rfc3339(next.ExpiresAt)}
		if cur.Holder != "" {
			details["expired_from"] = cur.Holder
		}
		return appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "acquire",
			Subject: db.LeaseSubject(req.Name), Token: rec.Token, Details: details})
	})
	return out, err
}

// RenewLease extends the caller's lease to now+TTL. The caller must hold
// the current token and the lease must not have expired: an expired lease
// is acquired again, with a new token. A refused renew changes nothing and
// returns ErrLeaseNotHeld (another holder, stale token, released, expired)
// or ErrLeaseNotFound; a missing or impossible token is ErrInvalidArgument.
func (s *Store) RenewLease(ctx context.Context, req db.RenewLeaseRequest) (db.Lease, error) {
	if err := db.ValidateLeaseName(req.Name); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseHolder(req.Holder); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseToken(req.FencingToken); err != nil {
		return db.Lease{}, err
	}
	ttl, err := s.opts.LeaseTTL(req.TTL)
	if err != nil {
		return db.Lease{}, err
	}
	holder := lease.Holder(req.Principal, req.Holder)
	var out db.Lease
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := heldLease(tx, req.Name)
		if err != nil {
			return err
		}
		next, err := lease.Renew(old.named(), holder, req.FencingToken, now, ttl)
		if err != nil {
			return leaseNotHeld(req.Name, err)
		}
		rec := *old
		rec.ExpiresAt, rec.UpdatedAt = next.ExpiresAt.UnixNano(), now.UnixNano()
		if err := putLease(tx, req.Name, &rec); err != nil {
			return err
		}
		out = rec.lease(req.Name, now)
		return appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "renew", Subject: db.LeaseSubject(req.Name),
			Token: rec.Token, Details: map[string]string{"holder": holder, "expires_at": rfc3339(next.ExpiresAt)}})
	})
	if err != nil {
		return db.Lease{}, err
	}
	return out, nil
}

// ReleaseLease frees the caller's lease so that the next acquire succeeds
// at once (with a larger token); waiting acquires are woken after the
// commit. The record stays with its token. A release after the lease
// expired, before anybody acquired it again, is accepted. A refused release
// changes nothing and returns ErrLeaseNotHeld or ErrLeaseNotFound; a
// missing or impossible token is ErrInvalidArgument.
func (s *Store) ReleaseLease(ctx context.Context, req db.ReleaseLeaseRequest) (db.Lease, error) {
	if err := db.ValidateLeaseName(req.Name); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseHolder(req.Holder); err != nil {
		return db.Lease{}, err
	}
	if err := db.ValidateLeaseToken(req.FencingToken); err != nil {
		return db.Lease{}, err
	}
	holder := lease.Holder(req.Principal, req.Holder)
	nw := s.leaseWaiters()
	var out db.Lease
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := heldLease(tx, req.Name)
		if err != nil {
			return err
		}
		if _, err := lease.Release(old.named(), holder, req.FencingToken); err != nil {
			return leaseNotHeld(req.Name, err)
		}
		rec := *old
		rec.Holder, rec.ExpiresAt, rec.UpdatedAt = "", 0, now.UnixNano()
		if err := putLease(tx, req.Name, &rec); err != nil {
			return err
		}
		out = rec.lease(req.Name, now)
		details := map[string]string{"holder": holder}
		if lease.Expired(db.FromUnixNano(old.ExpiresAt), now) {
			details["expired_at"] = rfc3339(db.FromUnixNano(old.ExpiresAt))
		}
		if err := appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "release", Subject: db.LeaseSubject(req.Name),
			Token: rec.Token, Details: details}); err != nil {
			return err
		}
		tx.OnCommit(func() { nw.wake(req.Name) })
		return nil
	})
	if err != nil {
		return db.Lease{}, err
	}
	return out, nil
}

// heldLease loads the record a renew or release acts on.
func heldLease(tx *bbolt.Tx, name string) (*leaseRecord, error) {
	rec, err := getLease(tx, name)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, db.Errorf(db.CodeNotFound, "lease not found: %q was never acquired", name)
	}
	return rec, nil
}

// CheckLease answers whether token is the current, unexpired token of the
// lease name: the question a resource guarded by the lease asks before it
// accepts a write. It returns the lease when it is, ErrNotCurrent (with the
// reason: stale, released or expired) when it is not, ErrLeaseNotFound when
// the name was never acquired, and ErrInvalidArgument for a token of zero
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
		if err := lease.CheckNamed(rec.named(), token, now); err != nil {
			return db.Errorf(db.CodeConflict, "fencing token is not current: lease %q: %s", name, strings.TrimPrefix(err.Error(), "lease: "))
		}
		out = rec.lease(name, now)
		return nil
	})
	if err != nil {
		return db.Lease{}, err
	}
	return out, nil
}

// GetLease returns the lease name, or ErrLeaseNotFound when it was never
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
// It returns ErrInvalidArgument for a limit outside 1..MaxListLimit.
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
// ErrNotCurrent when it is not, ErrJobNotFound, and ErrInvalidArgument for
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
		if rec.State != db.StateClaimed {
			return db.Errorf(db.CodeConflict, "fencing token is not current: job %d is %s, not claimed (last token %d)", id, rec.State, rec.Attempts)
		}
		if rec.Attempts != token {
			return db.Errorf(db.CodeConflict, "fencing token is not current: job %d: token %d, the current claim is %d", id, token, rec.Attempts)
		}
		job = rec.job()
		return nil
	})
	if err != nil {
		return db.Job{}, err
	}
	return job, nil
}

// nameWaiters wakes acquires waiting for a name. A channel per name with
// waiters is closed — after the commit — when the name is released.
type nameWaiters struct {
	mu sync.Mutex
	m  map[string]*leaseWait
}

type leaseWait struct {
	ch chan struct{}
	n  int
}

// subscribe returns a channel closed at the next wake of name, and the
// function that ends the subscription.
func (w *nameWaiters) subscribe(name string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lw := w.m[name]
	if lw == nil {
		lw = &leaseWait{ch: make(chan struct{})}
		w.m[name] = lw
	}
	lw.n++
	return lw.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		lw.n--
		if lw.n == 0 && w.m[name] == lw {
			delete(w.m, name)
		}
	}
}

// wake wakes every acquire waiting for name.
func (w *nameWaiters) wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw := w.m[name]; lw != nil {
		close(lw.ch)
		delete(w.m, name)
	}
}

// leaseWaiters returns the store's waiting acquires.
func (s *Store) leaseWaiters() *nameWaiters { return &s.nameWaiters }

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// leaseNotHeld turns a refusal of package lease into a CodeConflict
// refusal, keeping its reason.
func leaseNotHeld(name string, err error) error {
	return db.Errorf(db.CodeConflict, "lease is not held by this holder with this fencing token: lease %q: %s", name, strings.TrimPrefix(err.Error(), "lease: "))
}
