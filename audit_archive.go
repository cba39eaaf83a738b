package main

// fenceq audit archive: the client half of audit retention (the server's
// half is api/audit_archive.go). The server never removes an audit record
// until a client holds it: this command downloads the records older than
// the server's --audit-retention as an archive file, syncs it, verifies it
// from disk, renames it into place, and only then asks the server to remove
// what the file holds, up to its last record (sequence and hash). A crash
// at any point leaves either the records on the server, or the file on
// disk and the records on the server (the next run archives them again,
// from the same checkpoint), never neither. Run it from a timer (cron, a
// systemd timer), as logrotate is.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

// auditArchiveCommand: fenceq audit archive --out FILE [--limit N] [--json]
func auditArchiveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq audit archive", stderr)
	cf := addClientFlags(fs)
	out := fs.String("out", "", "file to write the archive to (required; never overwritten)")
	limit := fs.Uint64("limit", 0, "archive at most this many records (0: every record older than the retention)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	setUsage(fs, stderr, "fenceq audit archive --out FILE [--limit N] [--json]",
		"Move the audit records older than the server's --audit-retention into FILE (admin role): download them,\n"+
			"sync and verify the file, then have the server remove them, leaving a checkpoint from which the rest\n"+
			"of its chain verifies. \"fenceq audit verify --db FILE\" checks the file offline.")
	if _, err := parseCommand(fs, args, 0, 0); err != nil {
		return err
	}
	if *out == "" {
		return usageError{"fenceq audit archive needs --out FILE"}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	res, err := archiveAudit(ctx, c, *out, *limit)
	if err != nil {
		return cliError(c, err)
	}
	if *asJSON {
		return printJSON(stdout, res)
	}
	if res.Records == 0 {
		fmt.Fprintf(stdout, "nothing to archive: no audit record after the checkpoint %d is older than the server's retention\n", res.FromSeq)
		return nil
	}
	fmt.Fprintf(stdout, "archived %d audit records (%d-%d, older than %s) to %s; the server removed them (checkpoint %d)\n",
		res.Records, res.FromSeq+1, res.ThroughSeq, res.Before.Format(time.RFC3339), res.File, res.Checkpoint.Seq)
	return nil
}

// archiveResult is what one "fenceq audit archive" did.
type archiveResult struct {
	File       string                 `json:"file,omitempty"` // empty when there was nothing to archive
	Records    uint64                 `json:"records"`
	FromSeq    uint64                 `json:"from_seq"` // the checkpoint the archive starts after
	ThroughSeq uint64                 `json:"through_seq"`
	Before     time.Time              `json:"before"`
	Checkpoint client.AuditCheckpoint `json:"checkpoint"`
}

// archiveAudit downloads the archivable records into out, makes the file
// durable and verifies it, then has the server remove them.
func archiveAudit(ctx context.Context, c *client.Client, out string, limit uint64) (archiveResult, error) {
	if _, err := os.Lstat(out); err == nil {
		return archiveResult{}, usageError{fmt.Sprintf("%s exists: an archive is never overwritten; choose another --out", out)}
	}
	tmp := out + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return archiveResult{}, err
	}
	defer os.Remove(tmp) // a no-op after the rename
	_, err = c.ArchiveAudit(ctx, f, limit)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return archiveResult{}, err
	}
	rep, err := verifyArchiveFile(tmp)
	if err != nil {
		return archiveResult{}, err
	}
	if !rep.OK {
		return archiveResult{}, fmt.Errorf("the downloaded archive does not verify at record %d (%s); nothing was removed", rep.FirstBroken, rep.Reason)
	}
	res := archiveResult{Records: rep.Records, FromSeq: rep.StartSeq, ThroughSeq: rep.VerifiedSeq, Before: rep.Header.Before}
	if rep.Records == 0 {
		return res, nil
	}
	if err := os.Rename(tmp, out); err != nil {
		return archiveResult{}, err
	}
	d, err := os.Open(filepath.Dir(out))
	if err == nil {
		err = d.Sync() // the rename is durable before anything is removed
		d.Close()
	}
	if err != nil {
		return archiveResult{}, fmt.Errorf("sync the directory of %s: %w (nothing was removed)", out, err)
	}
	res.File = out
	for {
		cp, done, err := c.RemoveArchivedAudit(ctx, rep.VerifiedSeq, rep.VerifiedHash)
		if err != nil {
			return res, fmt.Errorf("%s holds records %d-%d, but removing them from the server failed (run the command again later: it archives from the server's checkpoint): %w",
				out, rep.StartSeq+1, rep.VerifiedSeq, err)
		}
		res.Checkpoint = cp
		if done {
			return res, nil
		}
	}
}

// verifyArchiveFile verifies an archive file offline.
func verifyArchiveFile(path string) (db.ArchiveReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return db.ArchiveReport{}, err
	}
	defer f.Close()
	return db.VerifyArchive(f)
}

// isArchiveFile reports whether path holds an audit archive (its first
// line is an archive header) rather than a database.
func isArchiveFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 64<<10)).ReadBytes('\n')
	var h db.ArchiveHeader
	return json.Unmarshal(line, &h) == nil && h.Format == db.ArchiveFormat
}

// printArchiveReport prints the offline verification of an archive file.
func printArchiveReport(stdout io.Writer, rep db.ArchiveReport, asJSON bool, path string) error {
	if asJSON {
		if err := printJSON(stdout, map[string]any{"archive": true, "ok": rep.OK, "records": rep.Records,
			"start_seq": rep.StartSeq, "start_hash": rep.StartHash, "end_seq": rep.HeadSeq, "end_hash": rep.HeadHash,
			"before": rep.Header.Before, "first_broken": rep.FirstBroken, "reason": rep.Reason}); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintf(stdout, "ok: archive of %d records, %d-%d (after %d), all older than %s, end %s\n",
			rep.Records, rep.StartSeq+1, rep.HeadSeq, rep.StartSeq, rep.Header.Before.Format(time.RFC3339), rep.HeadHash)
	} else {
		fmt.Fprintf(stdout, "BROKEN at sequence %d: %s\n", rep.FirstBroken, rep.Reason)
	}
	if !rep.OK {
		return fmt.Errorf("audit archive %s is broken at sequence %d", path, rep.FirstBroken)
	}
	return nil
}
