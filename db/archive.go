package db

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// An audit archive is the file "fenceq audit archive" writes before the
// server removes the records in it: JSON lines, first a header (ArchiveHeader),
// then one {"record":…} line per record in sequence order (the fields of
// GET /v1/audit), then one {"end":…} line (ArchiveEnd). It verifies on its
// own (VerifyArchive): the first record names the header's start hash as
// its prev_hash, each record's hash is recomputed from its fields, and the
// end line says how many records there are, so a file cut short is told
// from a whole one.

// ArchiveFormat names the file format in its header.
const ArchiveFormat = "fenceq-audit-archive"

// ArchiveHeader is an archive's first line.
type ArchiveHeader struct {
	Format  string `json:"format"`  // ArchiveFormat
	Version int    `json:"version"` // 1
	// StartSeq and StartHash are the link before the first record: the
	// store's checkpoint when the archive was written (0 and "" from the
	// first record of the log).
	StartSeq  uint64 `json:"start_seq"`
	StartHash string `json:"start_hash,omitempty"`
	// Before is the cut: every record in the file is older.
	Before    time.Time `json:"before"`
	CreatedAt time.Time `json:"created_at"`
}

// ArchiveRecord is one audit record in an archive: the fields of an
// AuditRecord as GET /v1/audit writes them.
type ArchiveRecord struct {
	Seq       uint64            `json:"seq"`
	Time      time.Time         `json:"time"`
	Principal string            `json:"principal"`
	Action    string            `json:"action"`
	Subject   string            `json:"subject"`
	Token     uint64            `json:"token"`
	Details   map[string]string `json:"details,omitempty"`
	PrevHash  string            `json:"prev_hash"`
	Hash      string            `json:"hash"`
}

// ArchiveEnd is an archive's last line: the last record and the count.
type ArchiveEnd struct {
	EndSeq  uint64 `json:"end_seq"`
	EndHash string `json:"end_hash,omitempty"`
	Records uint64 `json:"records"`
}

type archiveLine struct {
	Record *ArchiveRecord `json:"record,omitempty"`
	End    *ArchiveEnd    `json:"end,omitempty"`
}

// maxArchiveLine bounds one line of an archive read back: a record's
// details are a few kilobytes at most.
const maxArchiveLine = 1 << 20

// ArchiveWriter writes an archive, checking the chain as it goes: Add
// refuses a record that does not continue it, so a broken chain is never
// archived (and so never removed).
type ArchiveWriter struct {
	w    *bufio.Writer
	v    ChainVerifier
	n    uint64
	cut  int64
	done bool
}

// NewArchiveWriter writes h (Format and Version set) and returns the
// writer of the records that follow.
func NewArchiveWriter(w io.Writer, h ArchiveHeader) (*ArchiveWriter, error) {
	h.Format, h.Version = ArchiveFormat, 1
	start, err := hex.DecodeString(h.StartHash)
	if err != nil || (h.StartSeq > 0 && len(start) != 32) {
		return nil, fmt.Errorf("db: archive start hash %q is not a hash", h.StartHash)
	}
	aw := &ArchiveWriter{w: bufio.NewWriterSize(w, 64<<10), cut: h.Before.UnixNano()}
	aw.v.Start(AuditMark{Seq: h.StartSeq, Hash: start})
	return aw, aw.line(h)
}

func (aw *ArchiveWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	aw.w.Write(b)
	return aw.w.WriteByte('\n')
}

// Add writes r, which must be the next link of the chain and older than
// the header's cut.
func (aw *ArchiveWriter) Add(r AuditRecord) error {
	l, err := linkOf(ArchiveRecord(r))
	if err != nil {
		return err
	}
	if err := aw.check(&l); err != nil {
		return err
	}
	aw.n++
	return aw.line(archiveLine{Record: (*ArchiveRecord)(&r)})
}

func (aw *ArchiveWriter) check(l *AuditLink) error {
	if l.Time >= aw.cut {
		return fmt.Errorf("db: audit record %d is not older than the archive's cut", l.Seq)
	}
	given := l.Hash
	stored, err := l.Seal() // sets l.Hash to the hash of l's contents
	if err != nil {
		return err
	}
	if !bytes.Equal(given, l.Hash) {
		return fmt.Errorf("db: audit record %d: hash does not match its contents", l.Seq)
	}
	if !aw.v.Add(l.Seq, stored) {
		rep := aw.v.ReportSoFar(0, nil)
		return fmt.Errorf("db: %s", rep.Reason)
	}
	return nil
}

// Records is how many records were added.
func (aw *ArchiveWriter) Records() uint64 { return aw.n }

// Last is the last record added (the header's start when none was).
func (aw *ArchiveWriter) Last() AuditMark { return aw.v.Verified() }

// Close writes the end line and flushes. It does not close the
// underlying writer.
func (aw *ArchiveWriter) Close() error {
	if aw.done {
		return nil
	}
	aw.done = true
	last := aw.Last()
	end := ArchiveEnd{EndSeq: last.Seq, Records: aw.n}
	if last.Seq > 0 {
		end.EndHash = hex.EncodeToString(last.Hash)
	}
	if err := aw.line(archiveLine{End: &end}); err != nil {
		return err
	}
	return aw.w.Flush()
}

// linkOf is the chain link an archived record stands for.
func linkOf(r ArchiveRecord) (AuditLink, error) {
	prev, err := hex.DecodeString(r.PrevHash)
	if err != nil || len(prev) != 32 {
		return AuditLink{}, fmt.Errorf("db: audit record %d: prev_hash %q is not a hash", r.Seq, r.PrevHash)
	}
	hash, err := hex.DecodeString(r.Hash)
	if err != nil || len(hash) != 32 {
		return AuditLink{}, fmt.Errorf("db: audit record %d: hash %q is not a hash", r.Seq, r.Hash)
	}
	return AuditLink{Seq: r.Seq, Time: UnixNano(r.Time), Principal: r.Principal, Action: r.Action,
		Subject: r.Subject, Token: r.Token, Details: r.Details, PrevHash: prev, Hash: hash}, nil
}

// ArchiveReport is the result of verifying an archive: its header and the
// walk of its records (HeadSeq and HeadHash are the end line's).
type ArchiveReport struct {
	Header ArchiveHeader
	AuditReport
}

// ErrNotArchive is returned by VerifyArchive for a file that does not
// start with an archive header.
var ErrNotArchive = errors.New("db: not a fenceq audit archive")

// VerifyArchive reads an archive and checks it: the header, every
// record's sequence, prev_hash and hash from the header's start on, and
// the end line. A break is reported (OK false, FirstBroken, Reason), not
// returned as an error; an error is a read failure or ErrNotArchive.
func VerifyArchive(r io.Reader) (ArchiveReport, error) {
	var rep ArchiveReport
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxArchiveLine)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return rep, fmt.Errorf("db: read archive: %w", err)
		}
		return rep, ErrNotArchive
	}
	if err := json.Unmarshal(sc.Bytes(), &rep.Header); err != nil || rep.Header.Format != ArchiveFormat {
		return rep, ErrNotArchive
	}
	if rep.Header.Version != 1 {
		return rep, fmt.Errorf("db: audit archive version %d, this build reads 1", rep.Header.Version)
	}
	broken := func(seq uint64, format string, args ...any) (ArchiveReport, error) {
		rep.OK, rep.FirstBroken, rep.Reason = false, seq, fmt.Sprintf(format, args...)
		return rep, nil
	}
	start, err := hex.DecodeString(rep.Header.StartHash)
	if err != nil || (rep.Header.StartSeq > 0 && len(start) != 32) {
		return broken(rep.Header.StartSeq+1, "the header's start hash %q is not a hash", rep.Header.StartHash)
	}
	aw := &ArchiveWriter{cut: rep.Header.Before.UnixNano()}
	aw.v.Start(AuditMark{Seq: rep.Header.StartSeq, Hash: start})
	rep.StartSeq, rep.StartHash = rep.Header.StartSeq, rep.Header.StartHash
	var end *ArchiveEnd
	for sc.Scan() {
		next := aw.Last().Seq + 1
		if end != nil {
			return broken(next, "a line follows the end line")
		}
		var line archiveLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || (line.Record == nil) == (line.End == nil) {
			return broken(next, "line %d is neither a record nor the end", rep.Records+2)
		}
		if line.End != nil {
			end = line.End
			continue
		}
		rep.Records++
		l, err := linkOf(*line.Record)
		if err == nil {
			err = aw.check(&l)
		}
		if err != nil {
			return broken(next, "%s", err)
		}
	}
	if err := sc.Err(); err != nil {
		return rep, fmt.Errorf("db: read archive: %w", err)
	}
	last := aw.Last()
	rep.VerifiedSeq = last.Seq
	if last.Seq > 0 {
		rep.VerifiedHash = hex.EncodeToString(last.Hash)
	}
	if end == nil {
		return broken(last.Seq+1, "the archive has no end line: it was cut short after record %d", last.Seq)
	}
	rep.HeadSeq, rep.HeadHash = end.EndSeq, end.EndHash
	if end.Records != rep.Records || end.EndSeq != last.Seq || end.EndHash != rep.VerifiedHash {
		return broken(last.Seq+1, "the end line says %d records through %d, the file has %d through %d", end.Records, end.EndSeq, rep.Records, last.Seq)
	}
	rep.OK = true
	return rep, nil
}
