package db

import "errors"

// Sentinel errors returned by Store methods, wrapped with detail. Callers
// compare with errors.Is; package api maps each to one HTTP code.
var (
	// ErrInvalidArgument: the request is malformed (bad queue name, negative
	// or absurd duration, token above u32 max, missing worker). Nothing changed.
	ErrInvalidArgument = errors.New("db: invalid argument")
	// ErrTooLarge: a payload, result or attestation is above its size limit.
	ErrTooLarge = errors.New("db: too large")
	// ErrJobNotFound: no job has this id.
	ErrJobNotFound = errors.New("db: job not found")
	// ErrClaimNotFound refuses a heartbeat or failure from a caller that does
	// not hold the job's current claim: another holder, a stale fencing
	// token, or a job that is no longer claimed. It is what a lost claim
	// produces, so a fenced-off worker cannot tell it apart from one.
	ErrClaimNotFound = errors.New("db: claim not found")
	// ErrClaimMismatch refuses a completion for the same reasons as
	// ErrClaimNotFound; completions report it as a failed precondition.
	ErrClaimMismatch = errors.New("db: job is not claimed by this worker with this fencing token")
	// ErrWrongState: the job's state does not allow the operation (cancel of
	// a completed job, retry of an available one).
	ErrWrongState = errors.New("db: job state does not allow this")
	// ErrLocked: another process holds the database file.
	ErrLocked = errors.New("db: database file is locked by another process")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("db: store is closed")
	// ErrFull: the commit would have grown the file past Options.MaxSize.
	// Nothing of it was written; the same request may succeed once space
	// is freed inside the file or the bound is raised.
	ErrFull = errors.New("db: the database file has reached its size limit")
	// ErrCorrupt: a stored record could not be decoded.
	ErrCorrupt = errors.New("db: corrupt record")

	// Named leases and token checks.

	// ErrLeaseHeld refuses an acquire while the lease is held and unexpired,
	// also for the same holder name; the message names the holder and expiry.
	ErrLeaseHeld = errors.New("db: lease is held")
	// ErrLeaseNotHeld refuses a renew or release from a caller that does not
	// hold the lease's current token: another holder, a stale token, a
	// released lease, or (renew only) an expired one. Nothing changed.
	ErrLeaseNotHeld = errors.New("db: lease is not held by this holder with this fencing token")
	// ErrLeaseNotFound: no lease of this name was ever acquired.
	ErrLeaseNotFound = errors.New("db: lease not found")
	// ErrLeaseExhausted refuses an acquire of a name that has issued every
	// fencing token up to 4294967295.
	ErrLeaseExhausted = errors.New("db: lease has issued every fencing token")
	// ErrNotCurrent answers a check (CheckJob, CheckLease) whose token is not
	// the current claim or lease: stale, released, expired or never issued.
	ErrNotCurrent = errors.New("db: fencing token is not current")
)

// isRefusal reports whether err is a business refusal: an error a request
// returns before it writes anything. A refusal in one request of a shared
// commit does not affect the others; any other error aborts the commit.
func isRefusal(err error) bool {
	return errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrTooLarge) ||
		errors.Is(err, ErrJobNotFound) || errors.Is(err, ErrClaimNotFound) ||
		errors.Is(err, ErrClaimMismatch) || errors.Is(err, ErrWrongState) ||
		errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrLeaseNotHeld) ||
		errors.Is(err, ErrLeaseNotFound) || errors.Is(err, ErrLeaseExhausted) ||
		errors.Is(err, ErrNotCurrent)
}
