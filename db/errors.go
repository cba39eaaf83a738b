package db

import (
	"errors"
	"fmt"
	"strings"
)

// Code is the kind of a refusal: the API error code a client sees. Package
// api maps each code to one HTTP status.
type Code string

// Refusal codes.
const (
	// CodeInvalid: the request is malformed (bad queue name, negative or
	// absurd duration, token above u32 max, missing worker).
	CodeInvalid Code = "invalid_argument"
	// CodeTooLarge: a payload, result or attestation is above its limit.
	CodeTooLarge Code = "resource_exhausted"
	// CodeNotFound: no such job or lease, or (heartbeat, fail) the caller
	// does not hold the job's current claim.
	CodeNotFound Code = "not_found"
	// CodeConflict: the state does not allow it (a completion from a caller
	// that does not hold the claim, a cancel of a completed job, a lease
	// held by another, a token that is not current).
	CodeConflict Code = "failed_precondition"
	// CodeUnavailable: the store is closed.
	CodeUnavailable Code = "unavailable"
)

// Codes lists every refusal code.
var Codes = []Code{CodeInvalid, CodeTooLarge, CodeNotFound, CodeConflict, CodeUnavailable}

// Error is a refusal: a request the rules turned down before anything was
// written. Message says what is wrong, for the client as it is. Callers
// tell refusals apart with errors.As (or ErrorCode); any other error from a
// store is a fault.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Code == CodeInvalid {
		return "db: invalid argument: " + e.Message
	}
	return "db: " + e.Message
}

// Is makes errors.Is(err, target) true when target is a refusal of the
// same code whose message, if any, is part of err's: a target of
// &Error{Code: CodeNotFound} matches every not-found refusal, one with
// Message "claim not found" only those.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && strings.Contains(e.Message, t.Message)
}

// Errorf returns a refusal with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the refusal in err's chain, or "" when err
// is not a refusal.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsRefusal reports whether err is a refusal (an *Error in its chain).
func IsRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

var (
	// ErrClosed: the store was closed.
	ErrClosed = &Error{Code: CodeUnavailable, Message: "store is closed"}
	// ErrCorrupt: a stored record could not be decoded. It is a fault, not
	// a refusal.
	ErrCorrupt = errors.New("db: corrupt record")
)

// ErrFull: a commit would grow the store past its size limit (the bbolt
// engine's --max-db-size). Nothing of that commit was written; reads, and
// writes that fit in the space the store already has, go on. It is a fault
// of the server's configuration, not of the request: the API answers it 507
// resource_exhausted, naming the flag.
var ErrFull = errors.New("db: the store has reached its size limit")
