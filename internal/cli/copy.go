package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/fenceq/fenceq/internal/engine"
)

const copyUsage = `Copy a bbolt file into an empty
PostgreSQL database, for moving up from one server to several: jobs (with
their tokens, results and attestations), named leases, paused queues and the
audit chain, which verifies on the target as it did on the file. Stop the
server first: the file is read as it is, and nothing may write the target
meanwhile. A target that holds any fenceq job, lease, pause or audit record
is refused.`

// Copy is "fenceq copy": the engine package opens both stores.
func Copy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := NewFlagSet("fenceq copy", stderr)
	SetUsage(fs, stdout, "fenceq copy --from FILE --to postgres://…", copyUsage)
	from := fs.String("from", "", "the bbolt file to copy (its server stopped)")
	to := fs.String("to", "", "the postgres:// URL of the empty target database")
	if err := ParseWithEnv(fs, args); err != nil {
		return err
	}
	if *from == "" || *to == "" {
		return Usagef("copy needs --from FILE and --to postgres://…")
	}
	if engine.Of(*to) != engine.Postgres {
		return Usagef("--to %q is not a postgres:// or postgresql:// URL", engine.Display(*to))
	}
	rep, err := engine.Copy(ctx, *from, *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "copied %d jobs, %d leases and %d audit records (%d queues paused), %d schedules (%d tick records) from %s to %s; the audit chain verifies there (head %d %s)\n",
		rep.Jobs, rep.Leases, rep.AuditLinks, rep.Pauses, rep.Schedules, rep.ScheduleTicks, *from, engine.Display(*to), rep.Audit.HeadSeq, rep.Audit.HeadHash)
	return nil
}
