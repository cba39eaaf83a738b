package lease

import (
	"errors"
	"fmt"
	"time"
)

// Named leases: an exclusive lease on a name (a file path, a resource id)
// with a fencing token. Each acquisition issues the previous token plus one,
// so tokens of a name only ever grow — across release and expiry too, as
// long as the caller keeps the state (db keeps it for ever). A resource
// guarded by a lease remembers the highest token it has seen and refuses a
// lower one: a holder that was paused past its lease carries a smaller
// number than whoever acquired the name after it.

var (
	// ErrHeld is returned by Acquire while the lease is held and unexpired,
	// also when the caller has the same holder name: a restarted holder must
	// not share the old incarnation's token.
	ErrHeld = errors.New("lease: held")
	// ErrExpired is returned by Renew and CheckNamed when the holder's lease
	// has run out. The holder must acquire again and gets a new token.
	ErrExpired = errors.New("lease: expired")
	// ErrTokenRequired is returned for a token of zero where a named lease
	// needs the current one (renew, release, check).
	ErrTokenRequired = errors.New("lease: fencing token is required")
	// ErrTokensExhausted is returned by Acquire when the name has issued
	// MaxToken tokens and cannot issue a larger one.
	ErrTokensExhausted = errors.New("lease: every fencing token of this name has been issued")
	// ErrInvalidTTL is returned for a lease length that is not positive.
	ErrInvalidTTL = errors.New("lease: ttl must be positive")
)

// MaxNameBytes bounds a lease name.
const MaxNameBytes = 1024

// ValidateName checks a lease name: 1 to MaxNameBytes bytes of valid UTF-8
// without control characters. Slashes and any other printable character
// are allowed, so a file path is a name as it is.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: lease name is empty", ErrInvalidName)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: lease name is %d bytes, the limit is %d", ErrInvalidName, len(name), MaxNameBytes)
	}
	return checkPrintable("lease name", name)
}

// ValidateHolder checks the caller's holder label of a named lease: 1 to 200
// bytes, no control characters. The lease's holder is Holder(principal, label).
func ValidateHolder(label string) error {
	switch {
	case label == "":
		return fmt.Errorf("%w: holder is required", ErrInvalidName)
	case len(label) > 200:
		return fmt.Errorf("%w: holder is longer than 200 bytes", ErrInvalidName)
	}
	return checkPrintable("holder", label)
}

// Named is the state of a named lease. Token is the last token issued (0:
// never acquired). Holder is the current holder, or the last one when the
// lease expired without a release; it is empty after a release.
type Named struct {
	Holder    string
	Token     uint64
	ExpiresAt time.Time
}

// Held reports whether someone holds n at now: it has a holder whose lease
// has not expired.
func (n Named) Held(now time.Time) bool {
	return n.Holder != "" && !Expired(n.ExpiresAt, now)
}

// Acquire gives n to holder for ttl when nobody holds it (never acquired,
// released or expired), with the token after n's last one. It returns
// ErrHeld while n is held — whoever asks — ErrTokensExhausted when no larger
// token exists and ErrInvalidTTL for a ttl that is not positive.
func Acquire(n Named, holder string, now time.Time, ttl time.Duration) (Named, error) {
	if ttl <= 0 {
		return n, ErrInvalidTTL
	}
	if n.Held(now) {
		return n, fmt.Errorf("%w by %s until %s", ErrHeld, n.Holder, n.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if n.Token >= MaxToken {
		return n, ErrTokensExhausted
	}
	return Named{Holder: holder, Token: n.Token + 1, ExpiresAt: ExpiresAt(now, ttl)}, nil
}

// checkHolder is the rule renew and release share: holder must hold n's
// current token.
func checkHolder(n Named, holder string, token uint64) error {
	if token == 0 {
		return ErrTokenRequired
	}
	if err := ValidateToken(token); err != nil {
		return err
	}
	if n.Holder == "" {
		return fmt.Errorf("%w: the lease is not held (last token %d)", ErrNotHolder, n.Token)
	}
	if n.Holder != holder {
		return fmt.Errorf("%w: the lease is held by %s", ErrNotHolder, n.Holder)
	}
	if token != n.Token {
		return fmt.Errorf("%w: token %d, current token is %d", ErrStaleToken, token, n.Token)
	}
	return nil
}

// Renew extends holder's lease to now+ttl. holder must hold the current
// token and the lease must not have expired: an expired lease is not
// renewed (CheckNamed already answered "expired" for its token), the holder
// acquires again. It returns ErrTokenRequired, ErrInvalidToken,
// ErrNotHolder, ErrStaleToken, ErrExpired or ErrInvalidTTL.
func Renew(n Named, holder string, token uint64, now time.Time, ttl time.Duration) (Named, error) {
	if ttl <= 0 {
		return n, ErrInvalidTTL
	}
	if err := checkHolder(n, holder, token); err != nil {
		return n, err
	}
	if Expired(n.ExpiresAt, now) {
		return n, fmt.Errorf("%w at %s", ErrExpired, n.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	n.ExpiresAt = ExpiresAt(now, ttl)
	return n, nil
}

// Release frees n. holder must hold the current token; a release after the
// lease expired, before anybody acquired it again, is accepted (the lease
// is free either way). The token stays, so the next Acquire issues a larger
// one. It returns ErrTokenRequired, ErrInvalidToken, ErrNotHolder or
// ErrStaleToken.
func Release(n Named, holder string, token uint64) (Named, error) {
	if err := checkHolder(n, holder, token); err != nil {
		return n, err
	}
	return Named{Token: n.Token}, nil
}

// CheckNamed answers whether token is n's current, unexpired token: the
// question a guarded resource asks before it accepts a write. It returns
// ErrTokenRequired, ErrInvalidToken, ErrNotHolder (the lease is not held),
// ErrStaleToken (another token is current) or ErrExpired.
func CheckNamed(n Named, token uint64, now time.Time) error {
	if token == 0 {
		return ErrTokenRequired
	}
	if err := ValidateToken(token); err != nil {
		return err
	}
	if token != n.Token {
		return fmt.Errorf("%w: token %d, current token is %d", ErrStaleToken, token, n.Token)
	}
	if n.Holder == "" {
		return fmt.Errorf("%w: the lease was released", ErrNotHolder)
	}
	if Expired(n.ExpiresAt, now) {
		return fmt.Errorf("%w at %s", ErrExpired, n.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
