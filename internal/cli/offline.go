package cli

// The commands that need no server: token new, and the offline side of
// audit verify.

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
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
)

const tokenSynopsis = "fenceq token new NAME --roles ROLE[,ROLE…] (roles: producer, worker, admin)"

// tokenCommand: fenceq token new NAME --roles worker,producer (the
// arguments after "new").
func tokenCommand(args []string, stdout, stderr io.Writer) error {
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	fs := NewFlagSet("fenceq token new", stderr)
	rolesFlag := fs.String("roles", "", "comma-separated roles: producer, worker, admin")
	SetUsage(fs, stdout, tokenSynopsis, "Make a bearer token for principal NAME: print the token (once; it is stored nowhere) and\n"+
		"the line to add to the server's --auth-file, which holds only the token's SHA-256.")
	if err := ParseWithEnv(fs, args); err != nil {
		return err
	}
	if name == "" {
		return UsageError{"usage: " + tokenSynopsis + "; see \"fenceq token new --help\""}
	}
	var roles []api.Role
	for _, r := range strings.Split(*rolesFlag, ",") {
		if r = strings.TrimSpace(r); r != "" {
			roles = append(roles, api.Role(r))
		}
	}
	token, line, err := api.NewToken(name, roles)
	if err != nil {
		return UsageError{err.Error()}
	}
	fmt.Fprintf(stdout, "token (shown once; give it to %s as \"Authorization: Bearer <token>\"):\n%s\n\n", name, token)
	fmt.Fprintf(stdout, "add this line to the auth file:\n%s\n", line)
	return nil
}

// verifyFileAudit opens path read-only. When a server holds the file (its
// lock is exclusive), it verifies a copy instead; a copy taken while the
// server commits may be torn, so it is checked with bbolt's consistency
// check and taken again (a few times) until it is whole.
func verifyFileAudit(ctx context.Context, path string, stderr io.Writer) (db.AuditReport, error) {
	if postgres.IsURL(path) {
		// A PostgreSQL database: verified in one snapshot, servers running or not.
		store, err := postgres.Open(ctx, path, postgres.Options{})
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
