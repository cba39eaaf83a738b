package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/dbtest"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/vmihailenco/msgpack/v5"
	bbolt "go.etcd.io/bbolt"
)

func newLeaseClock() *testclock.Clock {
	return testclock.New(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
}

// openLeaseStore opens a store at path with clock. On cleanup it checks the
// file (bbolt and the store's invariants) and the audit chain, then closes
// it; a store the test closed itself is left alone.
func openLeaseStore(tb testing.TB, path string, clock func() time.Time) *Store {
	tb.Helper()
	s, err := Open(path, Options{Rules: db.Rules{Now: clock}, LockTimeout: 200 * time.Millisecond})
	if err != nil {
		tb.Fatalf("Open(%s) error = %v", path, err)
	}
	tb.Cleanup(func() {
		select {
		case <-s.closing:
			return
		default:
		}
		if err := s.Check(); err != nil {
			tb.Errorf("Check() at cleanup: %v", err)
		}
		if rep, err := s.VerifyAudit(context.Background()); err != nil || !rep.OK {
			tb.Errorf("VerifyAudit() at cleanup = %+v, %v; want OK", rep, err)
		}
		if err := s.Close(); err != nil {
			tb.Errorf("Close() error = %v", err)
		}
	})
	return s
}

func newLeaseStore(tb testing.TB) (*Store, *testclock.Clock) {
	tb.Helper()
	clk := newLeaseClock()
	return openLeaseStore(tb, filepath.Join(tb.TempDir(), "fenceq.db"), clk.Now), clk
}

func mustAcquire(tb testing.TB, s *Store, name, holder string, ttl time.Duration) db.Lease {
	tb.Helper()
	l, err := s.AcquireLease(context.Background(), db.AcquireLeaseRequest{Principal: "local", Name: name, Holder: holder, TTL: ttl})
	if err != nil {
		tb.Fatalf("AcquireLease(%q, %s) error = %v", name, holder, err)
	}
	return l
}

// rawLeaseState is the stored bytes of a lease record and the audit head,
// copied out of a read transaction.
type rawLeaseState struct {
	record    []byte
	auditHead []byte
}

func readRawLease(tb testing.TB, s *Store, name string) rawLeaseState {
	tb.Helper()
	var st rawLeaseState
	err := s.bolt.View(func(tx *bbolt.Tx) error {
		st.record = bytes.Clone(tx.Bucket(bucketLeases).Get([]byte(name)))
		st.auditHead = bytes.Clone(tx.Bucket(bucketMeta).Get(metaAuditHead))
		return nil
	})
	if err != nil {
		tb.Fatalf("read lease %q: %v", name, err)
	}
	return st
}

// TestStore_LeaseTokensAreMonotonic drives one name through release,
// expiry and a restart of the store (close and open the file again): every
// acquisition gets a larger token.
func TestStore_LeaseTokensAreMonotonic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	clk := newLeaseClock()
	s := openLeaseStore(t, path, clk.Now)
	const name = "/data/a.csv"

	l := mustAcquire(t, s, name, "a", time.Minute)
	if l.FencingToken != 1 {
		t.Fatalf("first AcquireLease() token = %d, want 1", l.FencingToken)
	}
	mustReleaseLease(t, s, name, "a", 1)
	if l = mustAcquire(t, s, name, "a", time.Minute); l.FencingToken != 2 {
		t.Fatalf("AcquireLease() after release token = %d, want 2", l.FencingToken)
	}
	clk.Advance(time.Minute)
	if l = mustAcquire(t, s, name, "a", time.Minute); l.FencingToken != 3 {
		t.Fatalf("AcquireLease() after expiry token = %d, want 3", l.FencingToken)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart while held: the lease is still held by the old incarnation.
	s = openLeaseStore(t, path, clk.Now)
	if _, err := s.AcquireLease(context.Background(), db.AcquireLeaseRequest{Principal: "local", Name: name, Holder: "a"}); !errors.Is(err, dbtest.ErrLeaseHeld) {
		t.Fatalf("AcquireLease() after restart, still held: error = %v, want ErrLeaseHeld", err)
	}
	mustReleaseLease(t, s, name, "a", 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart after release: the token is kept.
	s = openLeaseStore(t, path, clk.Now)
	got, err := s.GetLease(context.Background(), name)
	if err != nil || got.FencingToken != 3 || got.Held || got.Holder != "" {
		t.Fatalf("GetLease() after restart = %+v, %v; want released with token 3", got, err)
	}
	if l = mustAcquire(t, s, name, "a", time.Minute); l.FencingToken != 4 {
		t.Fatalf("AcquireLease() after restart token = %d, want 4", l.FencingToken)
	}
}

// TestLeaseRecord_Format pins the stored form: a msgpack map with short
// tags and a version.
func TestLeaseRecord_Format(t *testing.T) {
	rec := leaseRecord{V: leaseRecordVersion, Holder: "local|a", Token: 7, ExpiresAt: 3, AcquiredAt: 1, UpdatedAt: 2}
	b, err := encodeRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"v": "1", "h": "local|a", "t": "7", "x": "3", "aa": "1", "ua": "2"}
	if len(m) != len(want) {
		t.Errorf("record keys = %v, want %v", m, want)
	}
	for k, v := range want {
		if fmt.Sprint(m[k]) != v {
			t.Errorf("record[%q] = %v, want %s", k, m[k], v)
		}
	}
	released := leaseRecord{V: leaseRecordVersion, Token: 7, UpdatedAt: 2}
	b, _ = encodeRecord(&released)
	got, err := decodeLease("n", b)
	if err != nil || *got != released {
		t.Errorf("decodeLease(released) = %+v, %v; want %+v", got, err, released)
	}
	if _, err := decodeLease("n", []byte{0x80}); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("decodeLease(empty map) error = %v, want ErrCorrupt", err)
	}
}

func storedLease(tb testing.TB, s *Store, name string) *leaseRecord {
	tb.Helper()
	b := readRawLease(tb, s, name).record
	if b == nil {
		tb.Fatalf("lease %q is not stored", name)
	}
	rec, err := decodeLease(name, b)
	if err != nil {
		tb.Fatal(err)
	}
	return rec
}

func mustReleaseLease(tb testing.TB, s *Store, name, holder string, token uint64) {
	tb.Helper()
	if _, err := s.ReleaseLease(context.Background(), db.ReleaseLeaseRequest{Principal: "local", Name: name, Holder: holder, FencingToken: token}); err != nil {
		tb.Fatalf("ReleaseLease(%q, %s, %d) error = %v", name, holder, token, err)
	}
}
