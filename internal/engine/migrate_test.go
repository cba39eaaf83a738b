package engine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
	"github.com/fenceq/fenceq/internal/engine"
	"github.com/jackc/pgx/v5"
)

// TestMigrate_ABboltFileDryRunChangesNothingThenUpgrades: the release file
// of schema version 1 (testdata) is upgraded step by step; --dry-run
// prints the same steps and leaves the file byte for byte as it was.
func TestMigrate_ABboltFileDryRunChangesNothingThenUpgrades(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/release-8c034d8.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := engine.Migrate(context.Background(), path, true, &out); err != nil {
		t.Fatalf("Migrate(dry run) = %v", err)
	}
	for _, want := range []string{"schema version 1, this build's 7", "would apply upgrade 1 -> 2: fill idx_dead", "would apply upgrade 4 -> 5: fill idx_scheduled_queue", "would apply upgrade 5 -> 6", "would apply upgrade 6 -> 7: add the schedules"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Migrate(dry run) printed\n%s\nwant a line with %q", out.String(), want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, raw) {
		t.Fatal("Migrate(dry run) changed the file")
	}
	out.Reset()
	if err := engine.Migrate(context.Background(), path, false, &out); err != nil {
		t.Fatalf("Migrate() = %v", err)
	}
	if !strings.Contains(out.String(), "applied upgrade 6 -> 7") || !strings.Contains(out.String(), "schema version now 7") {
		t.Errorf("Migrate() printed\n%s", out.String())
	}
	out.Reset()
	if err := engine.Migrate(context.Background(), path, true, &out); err != nil || !strings.Contains(out.String(), "nothing to migrate") {
		t.Errorf("Migrate(dry run) after the upgrade = %v, printed\n%s\nwant nothing to migrate", err, out.String())
	}
	if err := engine.Migrate(context.Background(), filepath.Join(t.TempDir(), "missing.db"), false, &out); err == nil {
		t.Error("Migrate() of a missing file succeeded, want an error (serve would create it)")
	}
}

// TestMigrate_APostgresDatabaseDryRunPrintsTheSQLAndChangesNothing: on an
// empty schema, --dry-run prints every migration's SQL and creates no
// table; the migration then creates them, and a second dry run has
// nothing to do.
func TestMigrate_APostgresDatabaseDryRunPrintsTheSQLAndChangesNothing(t *testing.T) {
	u := pgtest.NewSchema(t)
	ctx := context.Background()
	tables := func() (n int) {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var out bytes.Buffer
	if err := engine.Migrate(ctx, u, true, &out); err != nil {
		t.Fatalf("Migrate(dry run) = %v", err)
	}
	for _, want := range []string{"schema version 0, this build's 6", "-- would apply migration 1: 0001_init.sql", "CREATE TABLE fenceq_jobs", "-- would apply migration 5: 0005_min_writer.sql", "ADD COLUMN min_writer",
		"-- would apply migration 6: 0006_schedules.sql", "CREATE TABLE fenceq_schedules", "ADD COLUMN backfilled"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Migrate(dry run) printed\n%s\nwant %q", out.String(), want)
		}
	}
	if n := tables(); n != 0 {
		t.Fatalf("tables after the dry run = %d, want 0", n)
	}
	out.Reset()
	if err := engine.Migrate(ctx, u, false, &out); err != nil {
		t.Fatalf("Migrate() = %v", err)
	}
	if !strings.Contains(out.String(), "schema version now 6") || tables() == 0 {
		t.Errorf("Migrate() printed\n%s\nand left %d tables", out.String(), tables())
	}
	out.Reset()
	if err := engine.Migrate(ctx, u, true, &out); err != nil || !strings.Contains(out.String(), "nothing to migrate") || !strings.Contains(out.String(), "minimum writer version v0.0.0") {
		t.Errorf("Migrate(dry run) after = %v, printed\n%s", err, out.String())
	}
}
