package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// tokenCommand: fenceq token new NAME --roles worker,producer
func tokenCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "new" {
		return usageError{"usage: fenceq token new NAME --roles producer,worker,admin"}
	}
	args = args[1:]
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	fs := newFlagSet("fenceq token new NAME", stderr)
	rolesFlag := fs.String("roles", "", "comma-separated roles: producer, worker, admin")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if name == "" {
		return usageError{"usage: fenceq token new NAME --roles producer,worker,admin"}
	}
	var roles []api.Role
	for _, r := range strings.Split(*rolesFlag, ",") {
		if r = strings.TrimSpace(r); r != "" {
			roles = append(roles, api.Role(r))
		}
	}
	token, line, err := api.NewToken(name, roles)
	if err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprintf(stdout, "token (shown once; give it to %s as \"Authorization: Bearer <token>\"):\n%s\n\n", name, token)
	fmt.Fprintf(stdout, "add this line to the auth file:\n%s\n", line)
	return nil
}

// auditCommand: fenceq audit verify --db FILE [--json]
func auditCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "verify" {
		return usageError{"usage: fenceq audit verify --db FILE [--json]"}
	}
	fs := newFlagSet("fenceq audit verify", stderr)
	path := fs.String("db", "./fenceq.db", "bbolt file to verify (read-only; a copy is used while a server holds it)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseWithEnv(fs, args[1:]); err != nil {
		return err
	}
	if isArchiveFile(*path) { // audit_archive.go
		rep, err := verifyArchiveFile(*path)
		if err != nil {
			return err
		}
		return printArchiveReport(stdout, rep, *asJSON, *path)
	}
	rep, err := verifyFileAudit(ctx, *path, stderr)
	if err != nil {
		return err
	}
	return printAuditReport(stdout, client.AuditReport{OK: rep.OK, Records: rep.Records, HeadSeq: rep.HeadSeq,
		HeadHash: rep.HeadHash, StartSeq: rep.StartSeq, StartHash: rep.StartHash, VerifiedSeq: rep.VerifiedSeq,
		FirstBroken: rep.FirstBroken, Reason: rep.Reason}, *asJSON, *path)
}

// verifyFileAudit opens path read-only. When a server holds the file (its
// lock is exclusive), it verifies a copy instead; a copy taken while the
// server commits may be torn, so it is checked with bbolt's consistency
// check and taken again (a few times) until it is whole.
func verifyFileAudit(ctx context.Context, path string, stderr io.Writer) (db.AuditReport, error) {
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
