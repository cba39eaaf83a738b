package lease

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxToken is the largest value a fencing token may have. A claim number is
// a count of claims; anything above u32 max is a client bug, not a claim.
const MaxToken uint64 = 4294967295

var (
	// ErrInvalidToken is returned for a fencing token above MaxToken.
	ErrInvalidToken = errors.New("lease: fencing token is above 4294967295 and cannot be a claim number")
	// ErrNotHolder is returned when a claim is held by someone else, or by nobody.
	ErrNotHolder = errors.New("lease: not the current holder")
	// ErrStaleToken is returned when the holder matches but the token is not
	// the current claim's number: the caller is an earlier incarnation.
	ErrStaleToken = errors.New("lease: stale fencing token")
	// ErrInvalidName is returned for an empty principal or worker name, or one
	// containing the separator '|'.
	ErrInvalidName = errors.New("lease: invalid holder name")
)

// HolderSeparator joins a principal and a worker label into a holder identity.
const HolderSeparator = "|"

// Holder returns the identity of a claim: "principal|worker". The principal
// comes from authentication, the worker label from the request, so two
// principals never share a holder even with the same worker label.
func Holder(principal, worker string) string {
	return principal + HolderSeparator + worker
}

// ValidateWorker checks a worker label: 1 to 200 bytes, printable.
func ValidateWorker(worker string) error {
	if worker == "" {
		return fmt.Errorf("%w: worker is required", ErrInvalidName)
	}
	if len(worker) > 200 {
		return fmt.Errorf("%w: worker is longer than 200 bytes", ErrInvalidName)
	}
	return checkPrintable("worker", worker)
}

// checkPrintable refuses text a log line or a status page would show wrongly:
// invalid UTF-8, control characters (C0, DEL and C1, U+0085 among them) and
// the line and paragraph separators U+2028 and U+2029.
func checkPrintable(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidName, field)
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("%w: %s contains a control character (%U)", ErrInvalidName, field, r)
		}
	}
	return nil
}

// ValidatePrincipal checks a principal name: non-empty, no '|' (which would
// make "principal|worker" ambiguous), no whitespace or control characters.
func ValidatePrincipal(principal string) error {
	if principal == "" {
		return fmt.Errorf("%w: principal is empty", ErrInvalidName)
	}
	if strings.ContainsAny(principal, HolderSeparator+" \t\r\n") {
		return fmt.Errorf("%w: principal %q contains '|' or whitespace", ErrInvalidName, principal)
	}
	return nil
}

// ValidateToken rejects tokens that cannot be claim numbers. Zero is valid
// and means "not given".
func ValidateToken(token uint64) error {
	if token > MaxToken {
		return ErrInvalidToken
	}
	return nil
}

// Claim is what a fenced call is checked against: the current holder and the
// current claim number. An empty Holder means the job is not claimed.
type Claim struct {
	Holder string
	Token  uint64
}

// Check decides whether a caller identified by holder, carrying token, may act
// on claim. It returns ErrInvalidToken, ErrNotHolder or ErrStaleToken. Expiry
// is deliberately not checked: a late call after expiry but before anybody
// claimed the job again is still the current claim.
func Check(claim Claim, holder string, token uint64) error {
	if err := ValidateToken(token); err != nil {
		return err
	}
	if claim.Holder == "" || claim.Holder != holder {
		return ErrNotHolder
	}
	if token != 0 && token != claim.Token {
		return fmt.Errorf("%w: token %d, current claim is %d", ErrStaleToken, token, claim.Token)
	}
	return nil
}

// Expired reports whether a lease that ends at expiresAt has ended at now.
// A lease is valid strictly before its expiry instant.
func Expired(expiresAt, now time.Time) bool {
	return !now.Before(expiresAt)
}

// ExpiresAt returns the expiry of a lease of length d taken at now.
func ExpiresAt(now time.Time, d time.Duration) time.Time {
	return now.Add(d)
}

// Backoff describes the retry wait of a failed job when the worker did not
// give one: Base·2^(attempt-1), capped at Max, with "equal jitter" (a
// uniformly random point in the upper half) so that jobs failing together do
// not retry together.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultBackoff waits 1s, 2s, 4s … up to one hour.
var DefaultBackoff = Backoff{Base: time.Second, Max: time.Hour}

// Delay returns the wait before the next attempt after the attempt-th one
// failed. random must be in [0, 1); callers pass a random number so that this
// function stays deterministic.
func (b Backoff) Delay(attempt uint64, random float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := b.Max
	if attempt <= 62 {
		// Shift without overflow: stop doubling once past Max.
		d = b.Base
		for i := uint64(1); i < attempt && d < b.Max; i++ {
			d *= 2
		}
		if d > b.Max {
			d = b.Max
		}
	}
	if random < 0 {
		random = 0
	}
	if random >= 1 {
		random = 0.999999
	}
	half := d / 2
	return half + time.Duration(float64(d-half)*random)
}
