package engine

// The offline side of the commands that need no server: verify a store's
// audit chain, check a downloaded backup, copy a file into PostgreSQL.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/internal/buildinfo"
)

// VerifyAudit walks the audit chain of the store path names, offline: a
// PostgreSQL database in one snapshot, servers running or not; a bbolt file
// opened read-only. When a server holds the file (its lock is exclusive),
// it verifies a copy instead; a copy taken while the server commits may be
// torn, so it is checked with bbolt's consistency check and taken again (a
// few times) until it is whole.
func VerifyAudit(ctx context.Context, path string, stderr io.Writer) (db.AuditReport, error) {
	if Of(path) == Postgres {
		// A PostgreSQL database: verified in one snapshot, servers running or not.
		store, err := postgres.Open(ctx, path, postgres.Options{Version: buildinfo.WriterVersion()})
		if err != nil {
			return db.AuditReport{}, err
		}
		defer store.Close()
		return store.VerifyAudit(ctx)
	}
	store, err := bolt.Open(path, bolt.Options{ReadOnly: true, LockTimeout: 200 * time.Millisecond})
	if err == nil {
		defer store.Close()
		return store.VerifyAudit(ctx)
	}
	if !errors.Is(err, bolt.ErrLocked) {
		return db.AuditReport{}, err
	}
	fmt.Fprintf(stderr, "%s is held by a running server; verifying a copy\n", path)
	dir, err := os.MkdirTemp("", "fenceq-audit-")
	if err != nil {
		return db.AuditReport{}, err
	}
	defer os.RemoveAll(dir)
	copyPath := filepath.Join(dir, "copy.db")
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if err := copyFile(path, copyPath); err != nil {
			return db.AuditReport{}, err
		}
		store, err := bolt.Open(copyPath, bolt.Options{ReadOnly: true})
		if err == nil {
			err = store.Check()
			if err == nil {
				rep, verr := store.VerifyAudit(ctx)
				store.Close()
				return rep, verr
			}
			store.Close()
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	return db.AuditReport{}, fmt.Errorf("could not take a consistent copy of %s while the server writes (%v); use GET /v1/audit/verify instead", path, lastErr)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CheckFile opens a bbolt file read-only (a backup "fenceq backup" just
// downloaded), runs its consistency check and walks its audit chain. It
// returns how many audit records verified; a broken chain is an error.
func CheckFile(ctx context.Context, path string) (uint64, error) {
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		return 0, err
	}
	rep, err := s.VerifyAudit(ctx)
	if err != nil {
		return 0, err
	}
	if !rep.OK {
		return 0, fmt.Errorf("audit chain broken at sequence %d: %s", rep.FirstBroken, rep.Reason)
	}
	return rep.Records, nil
}

// CopyReport is what Copy moved, and the audit chain verified on the target.
type CopyReport = postgres.CopyReport

// Copy copies the bbolt file from (its server stopped) into the empty
// PostgreSQL database to (postgres.Copy). A file that a server holds is
// bolt.ErrLocked, wrapped with a hint; a target that is not a PostgreSQL URL
// is refused before the file is opened.
func Copy(ctx context.Context, from, to string) (CopyReport, error) {
	if Of(to) != Postgres {
		return CopyReport{}, fmt.Errorf("--to %q is not a postgres:// or postgresql:// URL", Display(to))
	}
	src, err := bolt.Open(from, bolt.Options{ReadOnly: true, LockTimeout: 500 * time.Millisecond})
	if errors.Is(err, bolt.ErrLocked) {
		return CopyReport{}, fmt.Errorf("%w; stop the server that serves it before copying", err)
	}
	if err != nil {
		return CopyReport{}, err
	}
	defer src.Close()
	return postgres.Copy(ctx, to, src)
}
