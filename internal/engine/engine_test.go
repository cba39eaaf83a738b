package engine_test

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/cli"
	"github.com/fenceq/fenceq/internal/engine"
)

const pgURL = "postgres://fenceq@127.0.0.1:5432/fenceq?sslmode=disable"

func TestOf_APostgresURLIsPostgresAnythingElseABboltFile(t *testing.T) {
	for dsn, want := range map[string]engine.Kind{
		pgURL:                          engine.Postgres,
		"postgresql://u:secret@h/db":   engine.Postgres,
		"./fenceq.db":                  engine.Bolt,
		"/var/lib/fenceq/postgres.db":  engine.Bolt,
		"postgres.db":                  engine.Bolt,
		"http://example.com/fenceq.db": engine.Bolt,
	} {
		if got := engine.Of(dsn); got != want {
			t.Errorf("Of(%q) = %v, want %v", dsn, got, want)
		}
	}
	if got := engine.Display("postgres://u:secret@h/db"); strings.Contains(got, "secret") {
		t.Errorf("Display() = %q, shows the password", got)
	}
}

// parse defines the engine flags and parses args and the FENCEQ_ variables
// the way "fenceq serve" does.
func parse(t *testing.T, args ...string) *engine.Flags {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("max-lease", 0, "a flag of every engine")
	f := engine.AddFlags(fs)
	if err := cli.ParseWithEnv(fs, args); err != nil {
		t.Fatalf("ParseWithEnv(%v) error = %v", args, err)
	}
	return f
}

func ignoredNames(f *engine.Flags) []string {
	var names []string
	for _, ig := range f.Ignored() {
		names = append(names, ig.Flag)
	}
	return names
}

// A flag given explicitly (command line or FENCEQ_ variable) that means
// nothing on the engine --db picks is reported, naming the flag and the
// engine; defaults and flags of every engine are not.
func TestFlags_IgnoredNamesAnExplicitFlagOfTheOtherEngine(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"bbolt with its own flags", nil, []string{"--db", "q.db", "--max-db-size", "1048576", "--commit-settle", "1ms"}, nil},
		{"PostgreSQL, defaults only", nil, []string{"--db", pgURL, "--max-lease", "5"}, nil},
		{"PostgreSQL, --max-db-size on the command line", nil, []string{"--db", pgURL, "--max-db-size", "1048576"}, []string{"max-db-size"}},
		{"PostgreSQL, both", nil, []string{"--commit-settle", "0", "--db", pgURL, "--max-db-size", "0"}, []string{"commit-settle", "max-db-size"}},
		{"PostgreSQL from the environment, FENCEQ_COMMIT_SETTLE", map[string]string{"FENCEQ_DB": pgURL, "FENCEQ_COMMIT_SETTLE": "2ms"}, nil, []string{"commit-settle"}},
		{"a flag set to its default is still explicit", map[string]string{"FENCEQ_MAX_DB_SIZE": "0"}, []string{"--db", pgURL}, []string{"max-db-size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f := parse(t, tc.args...)
			if got := ignoredNames(f); !slices.Equal(got, tc.want) {
				t.Fatalf("Ignored() = %v, want %v", got, tc.want)
			}
			for _, ig := range f.Ignored() {
				msg := ig.String()
				if !strings.Contains(msg, "--"+ig.Flag) || !strings.Contains(msg, "PostgreSQL") || !strings.Contains(msg, ig.Env()) {
					t.Errorf("warning %q does not name --%s, %s and the PostgreSQL engine", msg, ig.Flag, ig.Env())
				}
			}
		})
	}
}

// The other direction: a PostgreSQL-only flag given to a bbolt server.
func TestFlags_IgnoredNamesAPostgresOnlyFlagOnBbolt(t *testing.T) {
	defer engine.OnlyOnForTest("max-lease", engine.Postgres)()
	f := parse(t, "--db", filepath.Join(t.TempDir(), "q.db"), "--max-lease", "5")
	ig := f.Ignored()
	if len(ig) != 1 || ig[0].Flag != "max-lease" || ig[0].Engine != engine.Bolt || ig[0].Only != engine.Postgres {
		t.Fatalf("Ignored() = %+v, want max-lease ignored by bbolt", ig)
	}
	if msg := ig[0].String(); !strings.Contains(msg, "--max-lease") || !strings.Contains(msg, "bbolt engine") {
		t.Errorf("warning %q does not name --max-lease and the bbolt engine", msg)
	}
	if f := parse(t, "--db", pgURL, "--max-lease", "5"); len(f.Ignored()) != 0 {
		t.Errorf("Ignored() on PostgreSQL = %+v, want none", f.Ignored())
	}
}

func TestFlags_OptionsRefusesAMaxDBSizeOutOfRange(t *testing.T) {
	for _, v := range []string{"-1", "1000"} {
		if _, err := parse(t, "--max-db-size", v).Options(db.Rules{}); err == nil || !strings.Contains(err.Error(), "--max-db-size") {
			t.Errorf("--max-db-size %s: Options() error = %v, want one naming --max-db-size", v, err)
		}
	}
	opts, err := parse(t, "--max-db-size", "1048576", "--commit-settle", "3ms").Options(db.Rules{MaxPayloadBytes: 7})
	if err != nil || opts.MaxSize != 1<<20 || opts.CommitSettle.Milliseconds() != 3 || opts.Rules.MaxPayloadBytes != 7 {
		t.Fatalf("Options() = %+v, %v", opts, err)
	}
}

// Open on a path opens (creates) a bbolt file; a second Open of the same
// file is refused as locked, with the hint.
func TestOpen_ABboltFileAndItsLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := engine.Open(ctx, path, engine.Options{})
	if err != nil {
		t.Fatalf("Open(%s) error = %v", path, err)
	}
	defer s.Close()
	r, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "p", Queue: "q"})
	if err != nil || r.Job.ID == 0 {
		t.Fatalf("EnqueueJob() = %+v, %v", r, err)
	}
	lockCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s2, err := engine.Open(lockCtx, path, engine.Options{}); err == nil {
		s2.Close()
		t.Fatal("a second Open of a held file succeeded")
	} else if !strings.Contains(err.Error(), "is another fenceq serving this file?") {
		t.Errorf("second Open error = %v, want the lock hint", err)
	}
	if _, err := engine.Copy(ctx, path, "./not-a-url.db"); err == nil || !strings.Contains(err.Error(), "not a postgres:// or postgresql:// URL") {
		t.Errorf("Copy to a file error = %v, want a refusal naming the URL schemes", err)
	}
}
