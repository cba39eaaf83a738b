package lease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAcquire(t *testing.T) {
	now := time.Unix(1000, 0)
	ttl := 10 * time.Second
	held := Named{Holder: "local|a", Token: 4, ExpiresAt: now.Add(time.Second)}
	tests := []struct {
		name      string
		state     Named
		holder    string
		ttl       time.Duration
		want      error
		wantToken uint64
	}{
		{"never acquired issues token 1", Named{}, "local|a", ttl, nil, 1},
		{"released issues the next token", Named{Token: 7}, "local|b", ttl, nil, 8},
		{"expired issues the next token", Named{Holder: "local|a", Token: 4, ExpiresAt: now}, "local|b", ttl, nil, 5},
		{"expired, same holder, still a new token", Named{Holder: "local|a", Token: 4, ExpiresAt: now.Add(-time.Hour)}, "local|a", ttl, nil, 5},
		{"held by another", held, "local|b", ttl, ErrHeld, 4},
		{"held by the same holder name", held, "local|a", ttl, ErrHeld, 4},
		{"every token issued", Named{Token: MaxToken}, "local|a", ttl, ErrTokensExhausted, MaxToken},
		{"last token can be issued", Named{Token: MaxToken - 1}, "local|a", ttl, nil, MaxToken},
		{"zero ttl", Named{}, "local|a", 0, ErrInvalidTTL, 0},
		{"negative ttl", Named{}, "local|a", -time.Second, ErrInvalidTTL, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Acquire(tt.state, tt.holder, now, tt.ttl)
			if !sameErr(err, tt.want) {
				t.Fatalf("Acquire() error = %v, want %v", err, tt.want)
			}
			if got.Token != tt.wantToken {
				t.Errorf("Acquire() token = %d, want %d", got.Token, tt.wantToken)
			}
			if err != nil {
				if got != tt.state {
					t.Errorf("Acquire() refused but changed the state: %+v, was %+v", got, tt.state)
				}
				return
			}
			if got.Holder != tt.holder || !got.ExpiresAt.Equal(now.Add(tt.ttl)) {
				t.Errorf("Acquire() = %+v, want holder %s until %v", got, tt.holder, now.Add(tt.ttl))
			}
		})
	}
}

func TestAcquire_HeldMessageNamesHolderAndExpiry(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	n := Named{Holder: "local|a", Token: 2, ExpiresAt: now.Add(time.Minute)}
	_, err := Acquire(n, "local|a", now, time.Second)
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("Acquire() error = %v, want ErrHeld", err)
	}
	for _, want := range []string{"local|a", "2026-01-02T03:05:05Z"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Acquire() error %q does not mention %q", err, want)
		}
	}
}

func TestRenew(t *testing.T) {
	now := time.Unix(1000, 0)
	cur := Named{Holder: "local|a", Token: 3, ExpiresAt: now.Add(time.Second)}
	tests := []struct {
		name   string
		state  Named
		holder string
		token  uint64
		ttl    time.Duration
		want   error
	}{
		{"current holder and token", cur, "local|a", 3, time.Minute, nil},
		{"stale token of the same holder", cur, "local|a", 2, time.Minute, ErrStaleToken},
		{"future token", cur, "local|a", 4, time.Minute, ErrStaleToken},
		{"other holder with the current token", cur, "local|b", 3, time.Minute, ErrNotHolder},
		{"other principal same label", cur, "alice|a", 3, time.Minute, ErrNotHolder},
		{"released", Named{Token: 3}, "local|a", 3, time.Minute, ErrNotHolder},
		{"never acquired", Named{}, "local|a", 1, time.Minute, ErrNotHolder},
		{"expired", Named{Holder: "local|a", Token: 3, ExpiresAt: now}, "local|a", 3, time.Minute, ErrExpired},
		{"no token", cur, "local|a", 0, time.Minute, ErrTokenRequired},
		{"token above u32 max", cur, "local|a", MaxToken + 1, time.Minute, ErrInvalidToken},
		{"zero ttl", cur, "local|a", 3, 0, ErrInvalidTTL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Renew(tt.state, tt.holder, tt.token, now, tt.ttl)
			if !sameErr(err, tt.want) {
				t.Fatalf("Renew() error = %v, want %v", err, tt.want)
			}
			if err != nil {
				if got != tt.state {
					t.Errorf("Renew() refused but changed the state: %+v, was %+v", got, tt.state)
				}
				return
			}
			want := Named{Holder: tt.state.Holder, Token: tt.state.Token, ExpiresAt: now.Add(tt.ttl)}
			if got != want {
				t.Errorf("Renew() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	now := time.Unix(1000, 0)
	cur := Named{Holder: "local|a", Token: 3, ExpiresAt: now.Add(time.Second)}
	tests := []struct {
		name   string
		state  Named
		holder string
		token  uint64
		want   error
	}{
		{"current holder and token", cur, "local|a", 3, nil},
		{"after expiry, before anyone acquired", Named{Holder: "local|a", Token: 3, ExpiresAt: now.Add(-time.Hour)}, "local|a", 3, nil},
		{"stale token", cur, "local|a", 2, ErrStaleToken},
		{"other holder", cur, "local|b", 3, ErrNotHolder},
		{"already released", Named{Token: 3}, "local|a", 3, ErrNotHolder},
		{"no token", cur, "local|a", 0, ErrTokenRequired},
		{"token above u32 max", cur, "local|a", MaxToken + 1, ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Release(tt.state, tt.holder, tt.token)
			if !sameErr(err, tt.want) {
				t.Fatalf("Release() error = %v, want %v", err, tt.want)
			}
			if err != nil {
				if got != tt.state {
					t.Errorf("Release() refused but changed the state: %+v, was %+v", got, tt.state)
				}
				return
			}
			if want := (Named{Token: tt.state.Token}); got != want {
				t.Errorf("Release() = %+v, want %+v (free, token kept)", got, want)
			}
			if got.Held(now) {
				t.Errorf("Held() after Release() = true")
			}
		})
	}
}

func TestCheckNamed(t *testing.T) {
	now := time.Unix(1000, 0)
	cur := Named{Holder: "local|a", Token: 3, ExpiresAt: now.Add(time.Second)}
	tests := []struct {
		name  string
		state Named
		token uint64
		want  error
	}{
		{"current unexpired token", cur, 3, nil},
		{"lower token", cur, 2, ErrStaleToken},
		{"higher token", cur, 4, ErrStaleToken},
		{"expired", Named{Holder: "local|a", Token: 3, ExpiresAt: now}, 3, ErrExpired},
		{"released", Named{Token: 3}, 3, ErrNotHolder},
		{"never acquired", Named{}, 1, ErrStaleToken},
		{"no token", cur, 0, ErrTokenRequired},
		{"token above u32 max", cur, MaxToken + 1, ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckNamed(tt.state, tt.token, now); !sameErr(err, tt.want) {
				t.Fatalf("CheckNamed() = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestNamed_TokensOnlyGrow drives one name through every transition and
// checks that each acquisition issues a larger token than any before.
func TestNamed_TokensOnlyGrow(t *testing.T) {
	now := time.Unix(1000, 0)
	var n Named
	var last uint64
	step := func(what string, next Named, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n = next
	}
	for i := 0; i < 5; i++ {
		next, err := Acquire(n, "local|a", now, time.Second)
		step("acquire", next, err)
		if n.Token <= last {
			t.Fatalf("acquire %d: token = %d, want above %d", i, n.Token, last)
		}
		last = n.Token
		switch i % 3 {
		case 0: // release
			next, err = Release(n, "local|a", n.Token)
			step("release", next, err)
		case 1: // renew, then let it expire
			next, err = Renew(n, "local|a", n.Token, now, time.Second)
			step("renew", next, err)
			now = now.Add(2 * time.Second)
		case 2: // expire without a word
			now = now.Add(time.Hour)
		}
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		want error
	}{
		{"/data/a.csv", nil},
		{"a", nil},
		{"résumé/日本語/ü", nil},
		{"with space and %25 and ?#", nil},
		{strings.Repeat("x", MaxNameBytes), nil},
		{"", ErrInvalidName},
		{strings.Repeat("x", MaxNameBytes+1), ErrInvalidName},
		{"bad\xffutf8", ErrInvalidName},
		{"new\nline", ErrInvalidName},
		{"nul\x00", ErrInvalidName},
	}
	for _, tt := range tests {
		if err := ValidateName(tt.name); !sameErr(err, tt.want) {
			t.Errorf("ValidateName(%.20q) = %v, want %v", tt.name, err, tt.want)
		}
	}
	if err := ValidateHolder(""); !errors.Is(err, ErrInvalidName) {
		t.Errorf("ValidateHolder(\"\") = %v, want ErrInvalidName", err)
	}
	if err := ValidateHolder("h\t1"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("ValidateHolder(control) = %v, want ErrInvalidName", err)
	}
	if err := ValidateHolder("etl-1 ü"); err != nil {
		t.Errorf("ValidateHolder(ok) = %v", err)
	}
}

func sameErr(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}

// Worker labels, lease names and holders refuse C1 controls (U+0085 among
// them), the line and paragraph separators and invalid UTF-8 (issue 18,
// item 9), and keep accepting printable text of any script.
func TestNamesRefuseC1ControlsAndLineSeparators(t *testing.T) {
	checks := map[string]func(string) error{"ValidateWorker": ValidateWorker, "ValidateName": ValidateName, "ValidateHolder": ValidateHolder}
	for fn, check := range checks {
		for _, bad := range []string{"a\u0085b", "a\u2028b", "a\u2029b", "a\u009bb", "a\u007fb", "bad\xffutf8"} {
			if err := check(bad); !errors.Is(err, ErrInvalidName) {
				t.Errorf("%s(%q) = %v, want ErrInvalidName", fn, bad, err)
			}
		}
		for _, good := range []string{"worker-1", "日本語 ü", "emoji 👩‍💻", "a\u00a0b"} {
			if err := check(good); err != nil {
				t.Errorf("%s(%q) = %v, want nil", fn, good, err)
			}
		}
	}
}
