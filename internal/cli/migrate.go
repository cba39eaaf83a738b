package cli

import (
	"context"
	"io"

	"github.com/fenceq/fenceq/internal/engine"
)

const migrateUsage = `Bring a store to this build's schema, as serve does at
start, for operators who migrate before a rollout: a bbolt file (its server
stopped) is upgraded in one transaction; a PostgreSQL database gets the
migrations it lacks in one transaction, while replicas of this release and
the one before may go on running (docs/operations.md, "Compatibility between
releases"). --dry-run changes nothing and prints the steps: the bbolt
upgrades, or the SQL of each missing migration.`

// Migrate is "fenceq migrate": the engine package opens the store.
func Migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := NewFlagSet("fenceq migrate", stderr)
	SetUsage(fs, stdout, "fenceq migrate [--dry-run] --db FILE|postgres://…", migrateUsage)
	dsn := fs.String("db", "./fenceq.db", "the bbolt file or postgres:// URL to migrate")
	dry := fs.Bool("dry-run", false, "print the steps (bbolt upgrades, or SQL) and change nothing")
	if err := ParseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("migrate takes no arguments (got %q)", fs.Args())
	}
	return engine.Migrate(ctx, *dsn, *dry, stdout)
}
