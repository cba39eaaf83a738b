package db

import (
	"errors"
	"fmt"
	"testing"
)

func TestCheckSchema(t *testing.T) {
	for _, tt := range []struct {
		have, want   uint64
		upgrade      bool
		refusesNewer bool
	}{
		{0, 2, false, false}, // a new store is made at want
		{1, 2, true, false},
		{2, 2, false, false},
		{3, 2, false, true},
	} {
		upgrade, err := CheckSchema("f.db", tt.have, tt.want)
		if upgrade != tt.upgrade || errors.Is(err, ErrSchemaNewer) != tt.refusesNewer || (err != nil) != tt.refusesNewer {
			t.Errorf("CheckSchema(%d, %d) = %v, %v; want upgrade %v, refused %v", tt.have, tt.want, upgrade, err, tt.upgrade, tt.refusesNewer)
		}
	}
}

func TestErrorMatchesByCodeAndMessagePart(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", Errorf(CodeNotFound, "claim not found: job %d is completed, not claimed", 5))
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || e.Message != "claim not found: job 5 is completed, not claimed" {
		t.Fatalf("errors.As(%v) = %+v", err, e)
	}
	for _, tt := range []struct {
		target *Error
		want   bool
	}{
		{&Error{Code: CodeNotFound}, true},
		{&Error{Code: CodeNotFound, Message: "claim not found: "}, true},
		{&Error{Code: CodeNotFound, Message: "job not found: "}, false},
		{&Error{Code: CodeConflict}, false},
	} {
		if got := errors.Is(err, tt.target); got != tt.want {
			t.Errorf("errors.Is(%v, %+v) = %v, want %v", err, tt.target, got, tt.want)
		}
	}
	if ErrorCode(errors.New("db: disk on fire")) != "" || ErrorCode(err) != CodeNotFound {
		t.Error("ErrorCode does not tell a refusal from a fault")
	}
	if got := Errorf(CodeInvalid, "queue %q is bad", "x").Error(); got != `db: invalid argument: queue "x" is bad` {
		t.Errorf("Error() = %q", got)
	}
}

func TestTransitionsLeaveTheirInputAsItWas(t *testing.T) {
	old := JobRecord{ID: 1, Queue: "q", State: StateClaimed, Attempts: 1, MaxAttempts: 3, ClaimedBy: "local|w1",
		LeaseExpiresAt: 100, Errors: []ErrorRecord{{Attempt: 1, At: 5, Error: "x"}}}
	keep := old.Clone()
	r := Rules{}
	r.SetDefaults()
	now := FromUnixNano(50)
	if _, _, err := r.Fail(&old, FailRequest{Fenced: Fenced{ID: 1, Principal: "local", Worker: "w1", FencingToken: 1}, Error: "y"}, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Complete(&old, CompleteRequest{Fenced: Fenced{ID: 1, Principal: "local", Worker: "w2", FencingToken: 1}}, now); !errors.Is(err, &Error{Code: CodeConflict, Message: "job is not claimed by this worker"}) {
		t.Errorf("Complete() by another worker = %v, want the conflict refusal", err)
	}
	if _, _, err := Heartbeat(&old, HeartbeatRequest{Fenced: Fenced{ID: 1, Principal: "local", Worker: "w1", FencingToken: 2}}, 0, now); !errors.Is(err, &Error{Code: CodeNotFound, Message: "claim not found"}) {
		t.Errorf("Heartbeat() with a future token = %v, want the not-found refusal", err)
	}
	if fmt.Sprint(old) != fmt.Sprint(keep) {
		t.Errorf("the transitions changed their input:\n%+v\nwant\n%+v", old, keep)
	}
}
