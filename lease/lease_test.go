package lease

import (
	"errors"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	cur := Claim{Holder: Holder("local", "w1"), Token: 3}
	tests := []struct {
		name   string
		claim  Claim
		holder string
		token  uint64
		want   error
	}{
		{"current token", cur, "local|w1", 3, nil},
		{"no token is the name check alone", cur, "local|w1", 0, nil},
		{"stale token of the same name", cur, "local|w1", 2, ErrStaleToken},
		{"future token", cur, "local|w1", 4, ErrStaleToken},
		{"other worker", cur, "local|w2", 3, ErrNotHolder},
		{"other principal same worker", cur, "alice|w1", 3, ErrNotHolder},
		{"not claimed", Claim{}, "local|w1", 0, ErrNotHolder},
		{"token above u32 max", cur, "local|w1", MaxToken + 1, ErrInvalidToken},
		{"token at u32 max is a number", Claim{Holder: "local|w1", Token: MaxToken}, "local|w1", MaxToken, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.claim, tt.holder, tt.token)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Check() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	if Expired(now.Add(time.Nanosecond), now) {
		t.Fatal("Expired() = true one nanosecond before expiry")
	}
	if !Expired(now, now) {
		t.Fatal("Expired() = false at the expiry instant")
	}
	if got := ExpiresAt(now, time.Second); !got.Equal(now.Add(time.Second)) {
		t.Fatalf("ExpiresAt() = %v", got)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: time.Second, Max: time.Minute}
	tests := []struct {
		attempt  uint64
		random   float64
		min, max time.Duration
	}{
		{1, 0, 500 * time.Millisecond, 500 * time.Millisecond},
		{1, 0.999, 500 * time.Millisecond, time.Second},
		{2, 0, time.Second, time.Second},
		{3, 0.5, 3 * time.Second, 3 * time.Second},
		{7, 0, 30 * time.Second, 30 * time.Second}, // 64s capped to 60s
		{1 << 40, 0.999, 30 * time.Second, time.Minute},
		{0, 0, 500 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		got := b.Delay(tt.attempt, tt.random)
		if got < tt.min || got > tt.max {
			t.Errorf("Delay(%d, %v) = %v, want in [%v, %v]", tt.attempt, tt.random, got, tt.min, tt.max)
		}
	}
}

func TestValidateNames(t *testing.T) {
	if err := ValidateWorker(""); !errors.Is(err, ErrInvalidName) {
		t.Errorf("ValidateWorker(\"\") = %v", err)
	}
	if err := ValidateWorker("w\n1"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("ValidateWorker(control) = %v", err)
	}
	if err := ValidateWorker("worker-1 ü"); err != nil {
		t.Errorf("ValidateWorker(ok) = %v", err)
	}
	if err := ValidatePrincipal("a|b"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("ValidatePrincipal(a|b) = %v", err)
	}
	if err := ValidatePrincipal("alice"); err != nil {
		t.Errorf("ValidatePrincipal(alice) = %v", err)
	}
}
