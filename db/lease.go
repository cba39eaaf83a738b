package db

import "time"

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
