package db

import (
	"errors"
	"strings"
	"time"

	"github.com/fenceq/fenceq/lease"
)

// Lease is a named lease as callers see it.
type Lease struct {
	Name string
	// Holder is principal|label of the current holder; after an expiry the
	// last holder; empty after a release.
	Holder string
	// FencingToken is the last token issued for the name: the current one
	// while Held.
	FencingToken uint64
	// Held reports whether Holder held the lease, unexpired, at the time of
	// the operation that returned it.
	Held bool
	// ExpiresAt is when the holder's lease ends; zero after a release.
	ExpiresAt time.Time
	// AcquiredAt is when FencingToken was issued.
	AcquiredAt time.Time
	UpdatedAt  time.Time
}

// AcquireLeaseRequest asks for the named lease Name for Principal's Holder.
type AcquireLeaseRequest struct {
	Principal string
	Name      string        // any UTF-8 without control characters, 1 to 1024 bytes
	Holder    string        // the caller's label; the lease's holder is Principal|Holder
	TTL       time.Duration // 0: the store's DefaultLease
	// Wait, when positive, waits up to this long (at most MaxLeaseWait) for
	// a held lease to be released or to expire.
	Wait time.Duration
}

// RenewLeaseRequest extends a lease the caller holds.
type RenewLeaseRequest struct {
	Principal    string
	Name         string
	Holder       string        // the caller's label, as given to AcquireLease
	FencingToken uint64        // the current token; required
	TTL          time.Duration // 0: the store's DefaultLease
}

// ReleaseLeaseRequest gives up a lease the caller holds.
type ReleaseLeaseRequest struct {
	Principal    string
	Name         string
	Holder       string // the caller's label, as given to AcquireLease
	FencingToken uint64 // the current token; required
}

// ListLeasesRequest pages through leases in name order (bytewise).
type ListLeasesRequest struct {
	Prefix string // only names that start with it, e.g. "/data/"
	After  string // cursor: names after this one
	Limit  int    // 0: DefaultListLimit
}

// LeasePage is one page of leases. Next is the cursor for the next page,
// empty when the listing is done.
type LeasePage struct {
	Leases []Lease
	Next   string
}

// LeaseRecord is a named lease as the rules see it, times as Unix
// nanoseconds (0 = unset). A record is never deleted, so Token — the last
// token issued for the name — only grows, across release, expiry and
// restarts.
type LeaseRecord struct {
	Holder     string // principal|label; "" after release
	Token      uint64 // last token issued
	ExpiresAt  int64  // 0 after release
	AcquiredAt int64  // when Token was issued
	UpdatedAt  int64
}

// Named is the record in package lease's terms.
func (r *LeaseRecord) Named() lease.Named {
	return lease.Named{Holder: r.Holder, Token: r.Token, ExpiresAt: FromUnixNano(r.ExpiresAt)}
}

// Lease is the record of name as callers see it at now.
func (r *LeaseRecord) Lease(name string, now time.Time) Lease {
	return Lease{Name: name, Holder: r.Holder, FencingToken: r.Token, Held: r.Named().Held(now),
		ExpiresAt: FromUnixNano(r.ExpiresAt), AcquiredAt: FromUnixNano(r.AcquiredAt), UpdatedAt: FromUnixNano(r.UpdatedAt)}
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// LeaseNotFound is the refusal for a name that was never acquired.
func LeaseNotFound(name string) error {
	return Errorf(CodeNotFound, "lease not found: %q was never acquired", name)
}

// AcquireLease gives the lease (old is nil when the name was never
// acquired) to holder for ttl when nobody holds it, with the name's next
// token. While it is held and unexpired — also by the same holder name —
// it is refused (CodeConflict) with a message naming the holder and expiry.
func AcquireLease(old *LeaseRecord, req AcquireLeaseRequest, holder string, ttl time.Duration, now time.Time) (LeaseRecord, AuditEvent, error) {
	var cur lease.Named
	if old != nil {
		cur = old.Named()
	}
	next, err := lease.Acquire(cur, holder, now, ttl)
	switch {
	case errors.Is(err, lease.ErrHeld):
		return LeaseRecord{}, AuditEvent{}, Errorf(CodeConflict, "lease is held by %s until %s (lease %q)", old.Holder, rfc3339(FromUnixNano(old.ExpiresAt)), req.Name)
	case errors.Is(err, lease.ErrTokensExhausted):
		return LeaseRecord{}, AuditEvent{}, Errorf(CodeConflict, "lease has issued every fencing token: lease %q has issued token %d; use another name", req.Name, cur.Token)
	case err != nil:
		return LeaseRecord{}, AuditEvent{}, Errorf(CodeInvalid, "%v", err)
	}
	rec := LeaseRecord{Holder: next.Holder, Token: next.Token,
		ExpiresAt: next.ExpiresAt.UnixNano(), AcquiredAt: now.UnixNano(), UpdatedAt: now.UnixNano()}
	details := map[string]string{"holder": holder, "expires_at": rfc3339(next.ExpiresAt)}
	if cur.Holder != "" {
		details["expired_from"] = cur.Holder
	}
	return rec, AuditEvent{Principal: req.Principal, Action: "acquire",
		Subject: LeaseSubject(req.Name), Token: rec.Token, Details: details}, nil
}

// leaseNotHeld turns a refusal of package lease into CodeConflict, keeping
// its reason.
func leaseNotHeld(name string, err error) error {
	return Errorf(CodeConflict, "lease is not held by this holder with this fencing token: lease %q: %s", name, strings.TrimPrefix(err.Error(), "lease: "))
}

// RenewLease extends holder's unexpired lease to now + ttl. Another holder,
// a stale token, a released or an expired lease are refused (CodeConflict).
func RenewLease(old *LeaseRecord, req RenewLeaseRequest, holder string, ttl time.Duration, now time.Time) (LeaseRecord, AuditEvent, error) {
	next, err := lease.Renew(old.Named(), holder, req.FencingToken, now, ttl)
	if err != nil {
		return LeaseRecord{}, AuditEvent{}, leaseNotHeld(req.Name, err)
	}
	rec := *old
	rec.ExpiresAt, rec.UpdatedAt = next.ExpiresAt.UnixNano(), now.UnixNano()
	return rec, AuditEvent{Principal: req.Principal, Action: "renew", Subject: LeaseSubject(req.Name),
		Token: rec.Token, Details: map[string]string{"holder": holder, "expires_at": rfc3339(next.ExpiresAt)}}, nil
}

// ReleaseLease frees holder's lease; the record keeps its token. A release
// after the lease expired, before anybody acquired it again, is accepted.
func ReleaseLease(old *LeaseRecord, req ReleaseLeaseRequest, holder string, now time.Time) (LeaseRecord, AuditEvent, error) {
	if _, err := lease.Release(old.Named(), holder, req.FencingToken); err != nil {
		return LeaseRecord{}, AuditEvent{}, leaseNotHeld(req.Name, err)
	}
	rec := *old
	rec.Holder, rec.ExpiresAt, rec.UpdatedAt = "", 0, now.UnixNano()
	details := map[string]string{"holder": holder}
	if lease.Expired(FromUnixNano(old.ExpiresAt), now) {
		details["expired_at"] = rfc3339(FromUnixNano(old.ExpiresAt))
	}
	return rec, AuditEvent{Principal: req.Principal, Action: "release", Subject: LeaseSubject(req.Name),
		Token: rec.Token, Details: details}, nil
}

// CheckLeaseToken answers whether token is the current, unexpired token of
// the lease name (CodeConflict with the reason when not).
func CheckLeaseToken(rec *LeaseRecord, name string, token uint64, now time.Time) error {
	if err := lease.CheckNamed(rec.Named(), token, now); err != nil {
		return Errorf(CodeConflict, "fencing token is not current: lease %q: %s", name, strings.TrimPrefix(err.Error(), "lease: "))
	}
	return nil
}
