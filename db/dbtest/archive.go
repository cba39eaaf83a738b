package dbtest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// ArchiveAudit reads its checkpoint and every page of records from one
// snapshot: a removal that commits between two pages (another client's
// archive, confirmed) changes nothing it reads, and the records it gives
// verify from the checkpoint it gave.
func testAnArchiveIsOneSnapshotWhateverARemovalDoesMeanwhile(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	total := db.MaxListLimit + 100 // more than a page
	enqueueScheduled(t, s, "q", total, 0)
	var recs []db.AuditRecord
	for {
		page, err := s.ListAudit(ctx, uint64(len(recs)), db.MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		if recs = append(recs, page...); len(page) < db.MaxListLimit {
			break
		}
	}
	if len(recs) != total {
		t.Fatalf("%d audit records, want %d", len(recs), total)
	}
	clk.Advance(2 * time.Hour)
	cut := clk.Now().Add(-time.Hour)
	through := recs[db.MaxListLimit+49] // past the first page
	hash, _ := hex.DecodeString(through.Hash)

	removed := make(chan error, 1)
	var got []db.AuditRecord
	var start db.AuditCheckpoint
	err := s.ArchiveAudit(ctx, db.ArchiveAuditRequest{Before: cut},
		func(cp db.AuditCheckpoint) error { start = cp; return nil },
		func(r db.AuditRecord) error {
			got = append(got, r)
			if len(got) == db.MaxListLimit {
				go func() {
					_, err := s.RemoveAudit(ctx, db.RemoveAuditRequest{Principal: "other", Before: cut,
						Through: db.AuditMark{Seq: through.Seq, Hash: hash}})
					removed <- err
				}()
				// An engine whose removal waits for the read (bbolt, when
				// the commit grows the file) removes after it instead.
				select {
				case err := <-removed:
					removed <- err
				case <-time.After(2 * time.Second):
				}
			}
			return nil
		})
	if err != nil {
		t.Fatalf("ArchiveAudit() error = %v", err)
	}
	if err := <-removed; err != nil {
		t.Fatalf("RemoveAudit() meanwhile = %v", err)
	}
	if start.Seq != 0 || len(got) != total {
		t.Fatalf("ArchiveAudit() = checkpoint %d and %d records, want 0 and %d (the snapshot before the removal)", start.Seq, len(got), total)
	}
	var buf bytes.Buffer
	aw, err := db.NewArchiveWriter(&buf, db.ArchiveHeader{StartSeq: start.Seq, StartHash: start.Hash, Before: cut})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if err := aw.Add(r); err != nil {
			t.Fatalf("record %d of the archive: %v", r.Seq, err)
		}
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.VerifyArchive(&buf); err != nil || !rep.OK {
		t.Fatalf("the archive read = %+v, %v; want one that verifies", rep, err)
	}

	// A limit, and an error of the caller's, end the read.
	var n int
	if err := s.ArchiveAudit(ctx, db.ArchiveAuditRequest{Before: cut, Limit: 3}, func(db.AuditCheckpoint) error { return nil },
		func(db.AuditRecord) error { n++; return nil }); err != nil || n != 3 {
		t.Errorf("ArchiveAudit(limit 3) = %d records, %v; want 3", n, err)
	}
	stop := errors.New("stop")
	if err := s.ArchiveAudit(ctx, db.ArchiveAuditRequest{Before: cut}, func(db.AuditCheckpoint) error { return nil },
		func(db.AuditRecord) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ArchiveAudit() whose add fails = %v, want that error", err)
	}
}
