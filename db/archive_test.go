package db

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// chainOf is n sealed links from the start of a chain, one second apart.
func chainOf(t *testing.T, n int, at time.Time) []AuditRecord {
	t.Helper()
	var out []AuditRecord
	var prev AuditLink
	for i := range n {
		l := NextAuditLink(prev.Seq, prev.Hash, at.Add(time.Duration(i)*time.Second), AuditEvent{Principal: "p", Action: "enqueue", Job: uint64(i + 1),
			Details: map[string]string{"queue": "a"}})
		if _, err := l.Seal(); err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Record())
		prev = l
	}
	return out
}

func writeArchive(t *testing.T, recs []AuditRecord, h ArchiveHeader) []byte {
	t.Helper()
	var buf bytes.Buffer
	aw, err := NewArchiveWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := aw.Add(r); err != nil {
			t.Fatalf("Add(record %d) error = %v", r.Seq, err)
		}
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestArchive_VerifiesWholeAndReportsACutOrAlteredFile: an archive
// written from a chain verifies offline from its header's start; one cut
// short, with an altered record, or with records from a later start is
// reported broken where it breaks; the writer refuses a record that is not
// older than the cut or does not continue the chain.
func TestArchive_VerifiesWholeAndReportsACutOrAlteredFile(t *testing.T) {
	at := time.Date(2031, 3, 14, 15, 9, 26, 123456789, time.UTC)
	recs := chainOf(t, 5, at)
	cut := at.Add(time.Hour)
	whole := writeArchive(t, recs[:3], ArchiveHeader{Before: cut})
	rep, err := VerifyArchive(bytes.NewReader(whole))
	if err != nil || !rep.OK || rep.Records != 3 || rep.HeadSeq != 3 || rep.HeadHash != recs[2].Hash || rep.StartSeq != 0 {
		t.Fatalf("VerifyArchive(records 1-3) = %+v, %v; want OK, 3 records ending at 3 (%s)", rep, err, recs[2].Hash)
	}
	later := writeArchive(t, recs[3:], ArchiveHeader{StartSeq: 3, StartHash: recs[2].Hash, Before: cut})
	if rep, err := VerifyArchive(bytes.NewReader(later)); err != nil || !rep.OK || rep.StartSeq != 3 || rep.Records != 2 {
		t.Errorf("VerifyArchive(records 4-5 after the checkpoint 3) = %+v, %v; want OK, 2 records from 3", rep, err)
	}

	lines := strings.SplitAfter(string(whole), "\n")
	broken := map[string]struct {
		file string
		at   uint64
	}{
		"cut short":            {strings.Join(lines[:3], ""), 3},
		"an altered principal": {strings.Replace(string(whole), `"principal":"p"`, `"principal":"q"`, 1), 1},
		"a wrong start":        {strings.Replace(string(later), `"start_seq":3`, `"start_seq":2`, 1), 3},
		"a record dropped":     {lines[0] + lines[2] + lines[3] + lines[4], 1},
		"a line after the end": {string(whole) + lines[1], 4},
	}
	for what, tc := range broken {
		rep, err := VerifyArchive(strings.NewReader(tc.file))
		if err != nil || rep.OK || rep.FirstBroken != tc.at {
			t.Errorf("VerifyArchive(%s) = %+v, %v; want broken at %d", what, rep, err, tc.at)
		}
	}
	if _, err := VerifyArchive(strings.NewReader("SQLite format 3\x00")); !errors.Is(err, ErrNotArchive) {
		t.Errorf("VerifyArchive(another file) error = %v, want ErrNotArchive", err)
	}

	var buf bytes.Buffer
	aw, _ := NewArchiveWriter(&buf, ArchiveHeader{Before: recs[1].Time})
	if err := aw.Add(recs[0]); err != nil {
		t.Fatal(err)
	}
	if err := aw.Add(recs[1]); err == nil {
		t.Errorf("Add(a record at the cut) = nil, want an error")
	}
	aw, _ = NewArchiveWriter(&buf, ArchiveHeader{Before: cut})
	if err := aw.Add(recs[1]); err == nil {
		t.Errorf("Add(record 2 first, from the start) = nil, want an error")
	}
}
