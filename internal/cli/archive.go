package cli

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
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

// auditArchiveCmd: fenceq audit archive --out FILE [--limit N] [--json]
var auditArchiveCmd = call[archiveResult]{
	name: "audit archive", synopsis: "fenceq audit archive --out FILE [--limit N] [--json]",
	jsonHelp: "print {\"file\",\"records\",\"from_seq\",\"through_seq\",\"before\",\"checkpoint\"} as JSON",
	about: "Move the audit records older than the server's --audit-retention into FILE (admin role): download them,\n" +
		"sync and verify the file, then have the server remove them, leaving a checkpoint from which the rest\n" +
		"of its chain verifies. \"fenceq audit verify --db FILE\" checks the file offline.",
	unbounded: true,
	bind: func(fs *flag.FlagSet, e Env) func([]string) (callFunc[archiveResult], error) {
		out := fs.String("out", "", "file to write the archive to (required; never overwritten)")
		limit := fs.Uint64("limit", 0, "archive at most this many records (0: every record older than the retention)")
		return func([]string) (callFunc[archiveResult], error) {
			if *out == "" {
				return nil, UsageError{"fenceq audit archive needs --out FILE"}
			}
			if _, err := os.Lstat(*out); err == nil {
				return nil, UsageError{fmt.Sprintf("%s exists: an archive is never overwritten; choose another --out", *out)}
			}
			return func(ctx context.Context, c *client.Client) (archiveResult, error) {
				return archiveAudit(ctx, c, *out, *limit)
			}, nil
		}
	},
	show: func(e Env, r archiveResult) error {
		if r.Records == 0 {
			_, err := fmt.Fprintf(e.Stdout, "nothing to archive: no audit record after the checkpoint %d is older than the server's retention\n", r.FromSeq)
			return err
		}
		_, err := fmt.Fprintf(e.Stdout, "archived %d audit records (%d-%d, older than %s) to %s; the server removed them (checkpoint %d)\n",
			r.Records, r.FromSeq+1, r.ThroughSeq, r.Before.Format(time.RFC3339), r.File, r.Checkpoint.Seq)
		return err
	},
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
