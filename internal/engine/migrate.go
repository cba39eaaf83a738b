package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/internal/buildinfo"
)

// Migrate brings the store dsn names to this build's schema, as serve does
// at start, and prints what it did to out; with dryRun it changes nothing
// and prints what it would do: a bbolt file's upgrade steps, or the SQL of
// PostgreSQL's missing migrations. A bbolt file that a server holds is
// bolt.ErrLocked after a short wait; a PostgreSQL database may be migrated
// while replicas run (the migrations only expand, under the migrations'
// advisory lock).
func Migrate(ctx context.Context, dsn string, dryRun bool, out io.Writer) error {
	verb := "applied"
	if dryRun {
		verb = "would apply"
	}
	if Of(dsn) == Postgres {
		rep, err := postgres.Migrate(ctx, dsn, postgres.Options{Version: buildinfo.WriterVersion()}, dryRun)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "PostgreSQL %s: schema version %d, this build's %d; minimum writer version %s, this build %s\n",
			Display(dsn), rep.From, postgres.SchemaVersion(), orNone(rep.MinWriter), buildinfo.WriterVersion())
		if len(rep.Steps) == 0 {
			fmt.Fprintln(out, "nothing to migrate")
			return nil
		}
		for _, m := range rep.Steps {
			raises := ""
			if m.RaisesMinWriter {
				raises = " (raises the minimum writer version to " + buildinfo.WriterVersion() + ")"
			}
			fmt.Fprintf(out, "-- %s migration %d: %s%s\n", verb, m.Version, m.Name, raises)
			if dryRun {
				fmt.Fprintln(out, strings.TrimRight(m.SQL, "\n"))
			}
		}
		if !dryRun {
			fmt.Fprintf(out, "schema version now %d\n", rep.To)
		}
		return nil
	}
	rep, err := bolt.Migrate(dsn, bolt.Options{LockTimeout: 500 * time.Millisecond}, dryRun)
	if err != nil {
		if errors.Is(err, bolt.ErrLocked) {
			return fmt.Errorf("%w; stop the server that holds it first (serve upgrades the file itself at start)", err)
		}
		return err
	}
	fmt.Fprintf(out, "bbolt file %s: schema version %d, this build's %d\n", dsn, rep.From, rep.To)
	if len(rep.Steps) == 0 {
		fmt.Fprintln(out, "nothing to migrate")
		return nil
	}
	for _, st := range rep.Steps {
		fmt.Fprintf(out, "%s upgrade %d -> %d: %s\n", verb, st.From, st.From+1, st.What)
	}
	if !dryRun {
		fmt.Fprintf(out, "schema version now %d\n", rep.To)
	}
	return nil
}

func orNone(v string) string {
	if v == "" {
		return "(none yet)"
	}
	return v
}
