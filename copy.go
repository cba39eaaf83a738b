package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/internal/cli"
)

const copyUsage = `Copy a bbolt file into an empty
PostgreSQL database, for moving up from one server to several: jobs (with
their tokens, results and attestations), named leases and the audit chain,
which verifies on the target as it did on the file. Stop the server first: the
file is read as it is, and nothing may write the target meanwhile. A target
that holds any fenceq job, lease or audit record is refused.`

// copyCommand is "fenceq copy".
func copyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("fenceq copy", stderr)
	cli.SetUsage(fs, stdout, "fenceq copy --from FILE --to postgres://…", copyUsage)
	from := fs.String("from", "", "the bbolt file to copy (its server stopped)")
	to := fs.String("to", "", "the postgres:// URL of the empty target database")
	if err := cli.ParseWithEnv(fs, args); err != nil {
		return err
	}
	if *from == "" || *to == "" {
		return cli.Usagef("copy needs --from FILE and --to postgres://…")
	}
	if !postgres.IsURL(*to) {
		return cli.Usagef("--to %q is not a postgres:// or postgresql:// URL", displayDB(*to))
	}
	src, err := bolt.Open(*from, bolt.Options{ReadOnly: true, LockTimeout: 500 * time.Millisecond})
	if errors.Is(err, bolt.ErrLocked) {
		return fmt.Errorf("%w; stop the server that serves it before copying", err)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	rep, err := postgres.Copy(ctx, *to, src)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "copied %d jobs, %d leases and %d audit records from %s to %s; the audit chain verifies there (head %d %s)\n",
		rep.Jobs, rep.Leases, rep.AuditLinks, *from, displayDB(*to), rep.Audit.HeadSeq, rep.Audit.HeadHash)
	return nil
}
