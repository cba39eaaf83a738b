package dbtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/lease"
)

func newLeaseClock() *testclock.Clock {
	return testclock.New(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
}

func newLeaseStore(tb testing.TB, newStore Factory) (db.Store, *testclock.Clock) {
	tb.Helper()
	clk := newLeaseClock()
	return newStore(tb, db.Rules{Now: clk.Now}), clk
}

func mustAcquire(tb testing.TB, s db.Store, name, holder string, ttl time.Duration) db.Lease {
	tb.Helper()
	l, err := s.AcquireLease(context.Background(), db.AcquireLeaseRequest{Principal: "local", Name: name, Holder: holder, TTL: ttl})
	if err != nil {
		tb.Fatalf("AcquireLease(%q, %s) error = %v", name, holder, err)
	}
	return l
}

func mustReleaseLease(tb testing.TB, s db.Store, name, holder string, token uint64) {
	tb.Helper()
	if _, err := s.ReleaseLease(context.Background(), db.ReleaseLeaseRequest{Principal: "local", Name: name, Holder: holder, FencingToken: token}); err != nil {
		tb.Fatalf("ReleaseLease(%q, %s, %d) error = %v", name, holder, token, err)
	}
}

// rawLeaseState is a lease as the store shows it, the audit head, and the
// whole store (see takeSnapshot), before or after a request.
type rawLeaseState struct {
	record    []byte
	auditHead []byte
	all       snapshot
}

func readRawLease(tb testing.TB, s db.Store, name string) rawLeaseState {
	tb.Helper()
	st := rawLeaseState{auditHead: auditHead(tb, s), all: takeSnapshot(tb, s)}
	if name == "" {
		return st
	}
	l, err := s.GetLease(context.Background(), name)
	switch {
	case db.ErrorCode(err) == db.CodeNotFound:
	case err != nil:
		tb.Fatalf("GetLease(%q) error = %v", name, err)
	default:
		l.Held = false // computed at the time of the read, not stored
		st.record = fmt.Appendf(nil, "%+v", l)
	}
	return st
}

func wantRawUnchanged(tb testing.TB, what string, before, after rawLeaseState) {
	tb.Helper()
	if !bytes.Equal(before.record, after.record) {
		tb.Errorf("%s changed the stored record:\nbefore %x\nafter  %x", what, before.record, after.record)
	}
	if !bytes.Equal(before.auditHead, after.auditHead) {
		tb.Errorf("%s appended to the audit log", what)
	}
	if d := before.all.diff(after.all); len(d) > 0 {
		tb.Errorf("%s changed the store: %s; want no change", what, strings.Join(d, ", "))
	}
}

func testStore_AcquireLease(t *testing.T, newStore Factory) {
	ctx := context.Background()
	t.Run("FirstAcquireIssuesToken1AndAudits", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		l := mustAcquire(t, s, "/data/a.csv", "etl-1", 10*time.Second)
		if l.FencingToken != 1 || l.Holder != "local|etl-1" || !l.Held || !l.ExpiresAt.Equal(clk.Now().Add(10*time.Second)) {
			t.Fatalf("AcquireLease() = %+v, want token 1 held by local|etl-1 until now+10s", l)
		}
		recs, err := s.ListAudit(ctx, 0, 10)
		if err != nil || len(recs) != 1 {
			t.Fatalf("ListAudit() = %d records, %v; want 1", len(recs), err)
		}
		r := recs[0]
		if r.Action != "acquire" || r.Subject != "lease:/data/a.csv" || r.Token != 1 || r.Principal != "local" || r.Details["holder"] != "local|etl-1" {
			t.Errorf("audit record = %+v, want acquire of lease:/data/a.csv token 1 by local", r)
		}
	})

	t.Run("ErrLeaseHeld", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		l := mustAcquire(t, s, "job-lock", "a", time.Minute)
		before := readRawLease(t, s, "job-lock")
		for _, holder := range []string{"b", "a"} { // another holder, and the same holder name
			_, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "job-lock", Holder: holder, TTL: time.Minute})
			if !errors.Is(err, ErrLeaseHeld) {
				t.Fatalf("AcquireLease(%s) while held error = %v, want ErrLeaseHeld", holder, err)
			}
			for _, want := range []string{"local|a", l.ExpiresAt.UTC().Format(time.RFC3339Nano)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("AcquireLease(%s) error %q does not mention %q", holder, err, want)
				}
			}
		}
		clk.Advance(time.Minute - time.Nanosecond)
		if _, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "job-lock", Holder: "b"}); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("AcquireLease() 1ns before expiry error = %v, want ErrLeaseHeld", err)
		}
		wantRawUnchanged(t, "refused acquires", before, readRawLease(t, s, "job-lock"))
	})

	t.Run("ExpiryMovedByTheClockIssuesTheNextToken", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Minute)
		clk.Advance(time.Minute)
		if got, err := s.GetLease(ctx, "n"); err != nil || got.Held {
			t.Fatalf("GetLease() at expiry = %+v, %v; want not held", got, err)
		}
		l := mustAcquire(t, s, "n", "b", time.Minute)
		if l.FencingToken != 2 || l.Holder != "local|b" {
			t.Fatalf("AcquireLease() after expiry = %+v, want token 2 for local|b", l)
		}
		if a := leaseLastAudit(t, s); a.Details["expired_from"] != "local|a" {
			t.Errorf("audit details = %v, want expired_from local|a", a.Details)
		}
	})

	t.Run("PrincipalsDoNotShareAHolder", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		if _, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "alice", Name: "n", Holder: "w"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "bob", Name: "n", Holder: "w"}); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("AcquireLease(bob|w) error = %v, want ErrLeaseHeld", err)
		}
		if _, err := s.RenewLease(ctx, db.RenewLeaseRequest{Principal: "bob", Name: "n", Holder: "w", FencingToken: 1}); !errors.Is(err, ErrLeaseNotHeld) {
			t.Fatalf("RenewLease(bob|w) error = %v, want ErrLeaseNotHeld", err)
		}
		if _, err := s.ReleaseLease(ctx, db.ReleaseLeaseRequest{Principal: "bob", Name: "n", Holder: "w", FencingToken: 1}); !errors.Is(err, ErrLeaseNotHeld) {
			t.Fatalf("ReleaseLease(bob|w) error = %v, want ErrLeaseNotHeld", err)
		}
	})

	t.Run("ErrInvalidArgument", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		tests := []struct {
			name string
			req  db.AcquireLeaseRequest
		}{
			{"empty name", db.AcquireLeaseRequest{Name: "", Holder: "a"}},
			{"name too long", db.AcquireLeaseRequest{Name: strings.Repeat("x", lease.MaxNameBytes+1), Holder: "a"}},
			{"control character", db.AcquireLeaseRequest{Name: "a\nb", Holder: "a"}},
			{"invalid UTF-8", db.AcquireLeaseRequest{Name: "a\xff", Holder: "a"}},
			{"no holder", db.AcquireLeaseRequest{Name: "n"}},
			{"negative ttl", db.AcquireLeaseRequest{Name: "n", Holder: "a", TTL: -time.Second}},
			{"ttl above max lease", db.AcquireLeaseRequest{Name: "n", Holder: "a", TTL: 2 * time.Hour}},
			{"negative wait", db.AcquireLeaseRequest{Name: "n", Holder: "a", Wait: -time.Second}},
			{"wait above max", db.AcquireLeaseRequest{Name: "n", Holder: "a", Wait: db.MaxLeaseWait + time.Millisecond}},
		}
		for _, tt := range tests {
			tt.req.Principal = "local"
			if _, err := s.AcquireLease(ctx, tt.req); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("AcquireLease(%s) error = %v, want ErrInvalidArgument", tt.name, err)
			}
		}
		if n := leaseCount(t, s); n != 0 {
			t.Errorf("refused acquires stored %d leases", n)
		}
	})

	t.Run("DefaultTTL", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		l := mustAcquire(t, s, "n", "a", 0)
		var defaults db.Rules
		defaults.SetDefaults()
		if want := clk.Now().Add(defaults.DefaultLease); !l.ExpiresAt.Equal(want) {
			t.Errorf("AcquireLease() without ttl expires at %v, want %v", l.ExpiresAt, want)
		}
	})
}

// TestStore_AcquireLease_OneWinnerPerRound has 16 goroutines acquire the
// same name at once, round after round; exactly one wins each round, with
// the round's number as its token.
func testStore_AcquireLease_OneWinnerPerRound(t *testing.T, newStore Factory) {
	s, _ := newLeaseStore(t, newStore)
	const goroutines, rounds = 16, 25
	ctx := context.Background()
	for round := 1; round <= rounds; round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []db.Lease
		var others []error
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "hot", Holder: fmt.Sprintf("g%d", g), TTL: time.Minute})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					winners = append(winners, l)
				} else {
					others = append(others, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners (%+v), want exactly 1", round, len(winners), winners)
		}
		for _, err := range others {
			if !errors.Is(err, ErrLeaseHeld) {
				t.Fatalf("round %d: a loser got %v, want ErrLeaseHeld", round, err)
			}
		}
		w := winners[0]
		if w.FencingToken != uint64(round) {
			t.Fatalf("round %d: winner's token = %d, want %d", round, w.FencingToken, round)
		}
		mustReleaseLease(t, s, "hot", strings.TrimPrefix(w.Holder, "local|"), w.FencingToken)
	}
	if seq := leaseAuditSeq(t, s); seq != 2*rounds {
		t.Errorf("audit records = %d, want %d (one acquire and one release per round)", seq, 2*rounds)
	}
}

func testStore_RenewLease(t *testing.T, newStore Factory) {
	ctx := context.Background()
	t.Run("CurrentHolderExtends", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Minute)
		clk.Advance(30 * time.Second)
		l, err := s.RenewLease(ctx, db.RenewLeaseRequest{Principal: "local", Name: "n", Holder: "a", FencingToken: 1, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if l.FencingToken != 1 || !l.ExpiresAt.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("RenewLease() = %+v, want token 1 until now+1m", l)
		}
		if a := leaseLastAudit(t, s); a.Action != "renew" || a.Token != 1 || a.Subject != "lease:n" {
			t.Errorf("audit = %+v, want renew of lease:n token 1", a)
		}
	})

	t.Run("RefusedRenewChangesNothing", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Minute)
		clk.Advance(time.Minute)
		mustAcquire(t, s, "n", "a", time.Minute) // a restart of "a" took token 2
		mustAcquire(t, s, "released", "a", time.Minute)
		mustReleaseLease(t, s, "released", "a", 1)
		mustAcquire(t, s, "expired", "a", time.Second)
		clk.Advance(time.Second)
		tests := []struct {
			what  string
			name  string
			req   db.RenewLeaseRequest
			want  error
			cause string
		}{
			{"stale token of the same holder", "n", db.RenewLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotHeld, "stale"},
			{"future token", "n", db.RenewLeaseRequest{Holder: "a", FencingToken: 3}, ErrLeaseNotHeld, "stale"},
			{"another holder with the current token", "n", db.RenewLeaseRequest{Holder: "b", FencingToken: 2}, ErrLeaseNotHeld, "held by local|a"},
			{"released", "released", db.RenewLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotHeld, "not held"},
			{"expired", "expired", db.RenewLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotHeld, "expired"},
			{"no token", "n", db.RenewLeaseRequest{Holder: "a"}, ErrInvalidArgument, "required"},
			{"token above u32 max", "n", db.RenewLeaseRequest{Holder: "a", FencingToken: lease.MaxToken + 1}, ErrInvalidArgument, "4294967295"},
			{"never acquired", "other", db.RenewLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotFound, "never acquired"},
		}
		for _, tt := range tests {
			before := readRawLease(t, s, tt.name)
			tt.req.Principal, tt.req.Name = "local", tt.name
			_, err := s.RenewLease(ctx, tt.req)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.cause) {
				t.Errorf("RenewLease(%s) error = %v, want %v mentioning %q", tt.what, err, tt.want, tt.cause)
			}
			wantRawUnchanged(t, "RenewLease("+tt.what+")", before, readRawLease(t, s, tt.name))
		}
	})
}

func testStore_ReleaseLease(t *testing.T, newStore Factory) {
	ctx := context.Background()
	t.Run("KeepsTheTokenAndTheRecord", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Minute)
		l, err := s.ReleaseLease(ctx, db.ReleaseLeaseRequest{Principal: "local", Name: "n", Holder: "a", FencingToken: 1})
		if err != nil {
			t.Fatal(err)
		}
		if l.FencingToken != 1 || l.Held || l.Holder != "" || !l.ExpiresAt.IsZero() {
			t.Fatalf("ReleaseLease() = %+v, want free with token 1", l)
		}
		if a := leaseLastAudit(t, s); a.Action != "release" || a.Token != 1 || a.Details["holder"] != "local|a" {
			t.Errorf("audit = %+v, want release of token 1 by local|a", a)
		}
		if got, err := s.GetLease(ctx, "n"); err != nil || got.FencingToken != 1 || got.Holder != "" || got.Held {
			t.Errorf("GetLease() after release = %+v, %v; want token 1, no holder", got, err)
		}
	})

	t.Run("AfterExpiryBeforeAnyAcquireIsAccepted", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Minute)
		clk.Advance(time.Hour)
		mustReleaseLease(t, s, "n", "a", 1)
		if l := mustAcquire(t, s, "n", "b", time.Minute); l.FencingToken != 2 {
			t.Fatalf("AcquireLease() after release token = %d, want 2", l.FencingToken)
		}
	})

	t.Run("RefusedReleaseChangesNothing", func(t *testing.T) {
		s, clk := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Minute)
		clk.Advance(time.Minute)
		mustAcquire(t, s, "n", "a", time.Minute) // token 2
		mustAcquire(t, s, "released", "a", time.Minute)
		mustReleaseLease(t, s, "released", "a", 1)
		tests := []struct {
			what string
			name string
			req  db.ReleaseLeaseRequest
			want error
		}{
			{"stale token of the same holder", "n", db.ReleaseLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotHeld},
			{"another holder", "n", db.ReleaseLeaseRequest{Holder: "b", FencingToken: 2}, ErrLeaseNotHeld},
			{"twice", "released", db.ReleaseLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotHeld},
			{"no token", "n", db.ReleaseLeaseRequest{Holder: "a"}, ErrInvalidArgument},
			{"no holder", "n", db.ReleaseLeaseRequest{FencingToken: 2}, ErrInvalidArgument},
			{"never acquired", "other", db.ReleaseLeaseRequest{Holder: "a", FencingToken: 1}, ErrLeaseNotFound},
		}
		for _, tt := range tests {
			before := readRawLease(t, s, tt.name)
			tt.req.Principal, tt.req.Name = "local", tt.name
			if _, err := s.ReleaseLease(ctx, tt.req); !errors.Is(err, tt.want) {
				t.Errorf("ReleaseLease(%s) error = %v, want %v", tt.what, err, tt.want)
			}
			wantRawUnchanged(t, "ReleaseLease("+tt.what+")", before, readRawLease(t, s, tt.name))
		}
	})
}

func testStore_CheckLease(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s, clk := newLeaseStore(t, newStore)
	mustAcquire(t, s, "n", "a", time.Minute)
	if l, err := s.CheckLease(ctx, "n", 1); err != nil || l.FencingToken != 1 || !l.Held {
		t.Fatalf("CheckLease(current) = %+v, %v; want token 1 held", l, err)
	}
	before := readRawLease(t, s, "n")
	clk.Advance(time.Minute)
	if _, err := s.CheckLease(ctx, "n", 1); !errors.Is(err, ErrNotCurrent) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("CheckLease(expired) error = %v, want ErrNotCurrent (expired)", err)
	}
	wantRawUnchanged(t, "CheckLease", before, readRawLease(t, s, "n"))
	mustAcquire(t, s, "n", "b", time.Minute)
	if _, err := s.CheckLease(ctx, "n", 1); !errors.Is(err, ErrNotCurrent) || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("CheckLease(stale) error = %v, want ErrNotCurrent (stale)", err)
	}
	if _, err := s.CheckLease(ctx, "n", 2); err != nil {
		t.Fatalf("CheckLease(new token) error = %v", err)
	}
	mustReleaseLease(t, s, "n", "b", 2)
	if _, err := s.CheckLease(ctx, "n", 2); !errors.Is(err, ErrNotCurrent) {
		t.Fatalf("CheckLease(released) error = %v, want ErrNotCurrent", err)
	}
	for _, tok := range []uint64{0, lease.MaxToken + 1} {
		if _, err := s.CheckLease(ctx, "n", tok); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CheckLease(token %d) error = %v, want ErrInvalidArgument", tok, err)
		}
	}
	if _, err := s.CheckLease(ctx, "other", 1); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("CheckLease(never acquired) error = %v, want ErrLeaseNotFound", err)
	}
}

func testStore_AcquireLease_Wait(t *testing.T, newStore Factory) {
	ctx := context.Background()
	t.Run("WakesWhenTheHolderReleases", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Hour)
		type result struct {
			l   db.Lease
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "n", Holder: "b", TTL: time.Minute, Wait: 30 * time.Second})
			done <- result{l, err}
		}()
		waitForLeaseWaiter(t, s, "n")
		start := time.Now()
		mustReleaseLease(t, s, "n", "a", 1)
		select {
		case r := <-done:
			if r.err != nil || r.l.FencingToken != 2 || r.l.Holder != "local|b" {
				t.Fatalf("waiting AcquireLease() = %+v, %v; want token 2 for local|b", r.l, r.err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("waiting AcquireLease() returned %v after the release", d)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("waiting AcquireLease() did not return after the release")
		}
	})

	t.Run("WaitEndsWithErrLeaseHeld", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Hour)
		_, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "n", Holder: "b", Wait: 30 * time.Millisecond})
		if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "local|a") {
			t.Fatalf("AcquireLease() after its wait = %v, want ErrLeaseHeld naming local|a", err)
		}
		if n := leaseWaiterCount(s, "n"); n != 0 {
			t.Errorf("%d waiters left registered", n)
		}
	})

	t.Run("ContextEndsTheWait", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Hour)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := s.AcquireLease(cctx, db.AcquireLeaseRequest{Principal: "local", Name: "n", Holder: "b", Wait: 30 * time.Second})
			done <- err
		}()
		waitForLeaseWaiter(t, s, "n")
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("AcquireLease() after cancel = %v, want context.Canceled", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("AcquireLease() did not return after its context was cancelled")
		}
	})

	t.Run("CloseEndsTheWait", func(t *testing.T) {
		s, _ := newLeaseStore(t, newStore)
		mustAcquire(t, s, "n", "a", time.Hour)
		done := make(chan error, 1)
		go func() {
			_, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "n", Holder: "b", Wait: 30 * time.Second})
			done <- err
		}()
		waitForLeaseWaiter(t, s, "n")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, db.ErrClosed) {
				t.Fatalf("AcquireLease() after Close = %v, want ErrClosed", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("AcquireLease() did not return after Close")
		}
	})

	// Real time end to end: the holder's lease runs out on the wall clock
	// and the waiter, woken by its timer at the expiry, takes the next token.
	t.Run("WakesAtTheHoldersExpiry", func(t *testing.T) {
		s := newStore(t, db.Rules{})
		mustAcquire(t, s, "n", "a", 50*time.Millisecond)
		l, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "n", Holder: "b", Wait: 30 * time.Second})
		if err != nil || l.FencingToken != 2 {
			t.Fatalf("AcquireLease() waiting for an expiry = %+v, %v; want token 2", l, err)
		}
	})
}

// waitForLeaseWaiter returns once an acquire waits for name.
func waitForLeaseWaiter(tb testing.TB, s db.Store, name string) {
	tb.Helper()
	waiters(tb, s)
	deadline := time.Now().Add(20 * time.Second)
	for leaseWaiterCount(s, name) == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("no acquire is waiting for %q", name)
		}
		time.Sleep(time.Millisecond)
	}
}

func leaseWaiterCount(s db.Store, name string) int {
	return s.(WaiterCounter).WaitingAcquires(name)
}

func testStore_ListLeases(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s, clk := newLeaseStore(t, newStore)
	names := []string{"/data/a.csv", "/data/b.csv", "/data/sub/c.csv", "/logs/x", "zürich"}
	for _, n := range names {
		mustAcquire(t, s, n, "a", time.Minute)
	}
	mustReleaseLease(t, s, "/logs/x", "a", 1)
	clk.Advance(30 * time.Second)
	page, err := s.ListLeases(ctx, db.ListLeasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range page.Leases {
		got = append(got, l.Name)
		if l.Held != (l.Name != "/logs/x") {
			t.Errorf("ListLeases(): %s Held = %v", l.Name, l.Held)
		}
	}
	if strings.Join(got, ",") != strings.Join(names, ",") || page.Next != "" {
		t.Fatalf("ListLeases() = %v next %q, want %v", got, page.Next, names)
	}

	page, err = s.ListLeases(ctx, db.ListLeasesRequest{Prefix: "/data/", Limit: 2})
	if err != nil || len(page.Leases) != 2 || page.Next != "/data/b.csv" {
		t.Fatalf("ListLeases(prefix /data/, limit 2) = %+v, %v; want 2 leases, next /data/b.csv", page, err)
	}
	page, err = s.ListLeases(ctx, db.ListLeasesRequest{Prefix: "/data/", After: page.Next, Limit: 2})
	if err != nil || len(page.Leases) != 1 || page.Leases[0].Name != "/data/sub/c.csv" || page.Next != "" {
		t.Fatalf("ListLeases(prefix /data/, after /data/b.csv) = %+v, %v; want only /data/sub/c.csv", page, err)
	}
	if _, err := s.ListLeases(ctx, db.ListLeasesRequest{Limit: db.MaxListLimit + 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ListLeases(limit too large) error = %v, want ErrInvalidArgument", err)
	}
	if _, err := s.GetLease(ctx, "nope"); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("GetLease(never acquired) error = %v, want ErrLeaseNotFound", err)
	}
}

// A prefix or cursor is any string a client sends: one that is no name
// (not UTF-8, or with a NUL, which PostgreSQL's text cannot carry) pages
// in bytewise order on every engine, as bbolt's keys do, and is never a
// fault.
func testStore_ListLeasesWithACursorThatIsNoNamePagesBytewise(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s, _ := newLeaseStore(t, newStore)
	for _, n := range []string{"a", "b", "ba", "c", "é", "éa"} {
		mustAcquire(t, s, n, "w", time.Minute)
	}
	for _, tt := range []struct {
		prefix, after string
		want          []string
	}{
		{"", "b\x00", []string{"ba", "c", "é", "éa"}},
		{"", "b\xff", []string{"c", "é", "éa"}},
		{"", "\xc3", []string{"é", "éa"}},
		{"", "\xff", nil},
		{"\xc3", "", []string{"é", "éa"}},
		{"\xc3", "é", []string{"éa"}},
		{"b\x00", "", nil},
		{"\xff", "a", nil},
	} {
		page, err := s.ListLeases(ctx, db.ListLeasesRequest{Prefix: tt.prefix, After: tt.after})
		if err != nil {
			t.Errorf("ListLeases(prefix %q, after %q) error = %v", tt.prefix, tt.after, err)
			continue
		}
		var got []string
		for _, l := range page.Leases {
			got = append(got, l.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || page.Next != "" {
			t.Errorf("ListLeases(prefix %q, after %q) = %q, next %q; want %q", tt.prefix, tt.after, got, page.Next, tt.want)
		}
	}
}

func testStore_CheckJob(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s, clk := newLeaseStore(t, newStore)
	res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	if _, err := s.CheckJob(ctx, id, 1); !errors.Is(err, ErrNotCurrent) {
		t.Fatalf("CheckJob(available job) error = %v, want ErrNotCurrent", err)
	}
	claim := func(worker string) db.Job {
		t.Helper()
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: worker, Queues: []string{"q"}, Lease: time.Minute})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("ClaimJobs() = %d jobs, %v; want 1", len(jobs), err)
		}
		return jobs[0]
	}
	first := claim("w1")
	if j, err := s.CheckJob(ctx, id, first.Attempts); err != nil || j.ID != id {
		t.Fatalf("CheckJob(current claim) = %+v, %v; want the job", j, err)
	}
	clk.Advance(2 * time.Minute)
	if _, err := s.CheckJob(ctx, id, first.Attempts); err != nil {
		t.Fatalf("CheckJob(expired, not claimed again) error = %v, want current", err)
	}
	second := claim("w1") // a restart of the same worker name
	if _, err := s.CheckJob(ctx, id, first.Attempts); !errors.Is(err, ErrNotCurrent) {
		t.Fatalf("CheckJob(first claim after a re-claim) error = %v, want ErrNotCurrent", err)
	}
	if _, err := s.CheckJob(ctx, id, second.Attempts); err != nil {
		t.Fatalf("CheckJob(second claim) error = %v", err)
	}
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: id, Principal: "local", Worker: "w1", FencingToken: second.Attempts}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckJob(ctx, id, second.Attempts); !errors.Is(err, ErrNotCurrent) || !strings.Contains(err.Error(), "completed") {
		t.Fatalf("CheckJob(completed job) error = %v, want ErrNotCurrent naming the state", err)
	}
	for _, tok := range []uint64{0, lease.MaxToken + 1} {
		if _, err := s.CheckJob(ctx, id, tok); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CheckJob(token %d) error = %v, want ErrInvalidArgument", tok, err)
		}
	}
	if _, err := s.CheckJob(ctx, id+100, 1); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("CheckJob(unknown id) error = %v, want ErrJobNotFound", err)
	}
}

func leaseCount(tb testing.TB, s db.Store) int {
	tb.Helper()
	page, err := s.ListLeases(context.Background(), db.ListLeasesRequest{Limit: db.MaxListLimit})
	if err != nil {
		tb.Fatalf("ListLeases() error = %v", err)
	}
	return len(page.Leases)
}

func leaseAuditSeq(tb testing.TB, s db.Store) uint64 {
	tb.Helper()
	return auditSeq(tb, s)
}

func leaseLastAudit(tb testing.TB, s db.Store) db.AuditRecord {
	tb.Helper()
	seq := leaseAuditSeq(tb, s)
	recs, err := s.ListAudit(context.Background(), seq-1, 1)
	if err != nil || len(recs) != 1 {
		tb.Fatalf("ListAudit(%d, 1) = %d records, %v", seq-1, len(recs), err)
	}
	return recs[0]
}
