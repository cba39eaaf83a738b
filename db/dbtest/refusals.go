package dbtest

import "github.com/fenceq/fenceq/db"

// The refusals the suite expects, for errors.Is: a code and a part of the
// message, the text every engine's refusal carries (see db.Error.Is). A
// refusal's code is what the API answers; its message is what the client
// reads, so both are held to.
var (
	ErrInvalidArgument = &db.Error{Code: db.CodeInvalid}
	ErrTooLarge        = &db.Error{Code: db.CodeTooLarge, Message: "too large: "}
	ErrJobNotFound     = &db.Error{Code: db.CodeNotFound, Message: "job not found: "}
	ErrClaimNotFound   = &db.Error{Code: db.CodeNotFound, Message: "claim not found: "}
	ErrClaimMismatch   = &db.Error{Code: db.CodeConflict, Message: "job is not claimed by this worker with this fencing token: "}
	ErrWrongState      = &db.Error{Code: db.CodeConflict, Message: "job state does not allow this: "}
	ErrLeaseHeld       = &db.Error{Code: db.CodeConflict, Message: "lease is held by "}
	ErrLeaseNotHeld    = &db.Error{Code: db.CodeConflict, Message: "lease is not held by this holder with this fencing token: "}
	ErrLeaseNotFound   = &db.Error{Code: db.CodeNotFound, Message: "lease not found: "}
	ErrLeaseExhausted  = &db.Error{Code: db.CodeConflict, Message: "lease has issued every fencing token: "}
	ErrNotCurrent      = &db.Error{Code: db.CodeConflict, Message: "fencing token is not current: "}
)
