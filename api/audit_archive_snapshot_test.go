package api_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// removingStore runs remove once, while an archive is being read: after
// its checkpoint is read and before its records are (in the start of
// Store.ArchiveAudit, or before the first ListAudit page an archive read
// page by page would ask for). It is the real store, with a real removal
// by another client at the worst moment.
type removingStore struct {
	db.Store
	once   sync.Once
	remove func()
}

func (s *removingStore) ListAudit(ctx context.Context, after uint64, limit int) ([]db.AuditRecord, error) {
	s.once.Do(s.remove)
	return s.Store.ListAudit(ctx, after, limit)
}

func (s *removingStore) ArchiveAudit(ctx context.Context, req db.ArchiveAuditRequest, start func(db.AuditCheckpoint) error, add func(db.AuditRecord) error) error {
	return s.Store.ArchiveAudit(ctx, req, func(cp db.AuditCheckpoint) error {
		s.once.Do(s.remove)
		return start(cp)
	}, add)
}

// TestAuditArchive_ARemovalDuringAnArchiveLeavesItWhole: two archives at
// once — the second client's removal commits while the first's archive is
// read — gave the first a 500 ("internal error"): its checkpoint and its
// records came from different reads, and the chain check failed. The
// archive is one snapshot: it holds every record after the checkpoint it
// names, and verifies.
func TestAuditArchive_ARemovalDuringAnArchiveLeavesItWhole(t *testing.T) {
	clk := newStatusClock()
	rules := db.Rules{Now: clk.Now}
	store := newStore(t, rules)
	ctx := context.Background()
	reqs := make([]db.EnqueueRequest, 20)
	for i := range reqs {
		reqs[i] = db.EnqueueRequest{Principal: "local", Queue: "q"}
	}
	if _, err := store.EnqueueJobs(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	recs, err := store.ListAudit(ctx, 0, 100)
	if err != nil || len(recs) != 20 {
		t.Fatalf("ListAudit() = %d records, %v; want 20", len(recs), err)
	}
	clk.Advance(2 * time.Hour)
	removed := make(chan error, 1)
	rs := &removingStore{Store: store, remove: func() {
		go func() {
			_, err := store.RemoveAudit(ctx, db.RemoveAuditRequest{Principal: "other", Before: clk.Now().Add(-time.Hour),
				Through: db.AuditMark{Seq: recs[9].Seq, Hash: mustHex(t, recs[9].Hash)}})
			removed <- err
		}()
		// bbolt may make the removal wait for the archive's read
		// transaction (when its commit grows the file): then it lands
		// after the archive, which must be whole either way.
		select {
		case err := <-removed:
			removed <- err
		case <-time.After(2 * time.Second):
		}
	}}
	srv := apitest.Serve(t, rs, api.Config{Now: clk.Now, AuditRetention: time.Hour})
	ts := &testServer{t: t, URL: srv.URL, store: store, client: srv.HTTP.Client()}

	r := ts.get("/v1/audit/archive")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/audit/archive with a removal meanwhile = %v, want 200", r)
	}
	rep, err := db.VerifyArchive(bytes.NewReader(r.body))
	if err != nil || !rep.OK || rep.Header.StartSeq != 0 || rep.Records != 20 || rep.HeadSeq != 20 {
		t.Fatalf("the archive = %+v, %v; want records 1-20 from the start, verifying", rep, err)
	}
	if err := <-removed; err != nil {
		t.Fatalf("the other client's RemoveAudit() = %v", err)
	}
	if h, err := store.AuditHead(ctx); err != nil || h.Checkpoint.Seq != 10 {
		t.Fatalf("AuditHead() = %+v, %v; want the checkpoint at 10 (the removal happened)", h, err)
	}
}

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatalf("hex.DecodeString(%q) error = %v", s, err)
	}
	return b
}
