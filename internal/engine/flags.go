package engine

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db"
)

// Flags are the serve flags that pick an engine (--db) and tune one
// (--commit-settle, --max-db-size: bbolt's). AddFlags defines them.
type Flags struct {
	DB           string
	CommitSettle time.Duration
	MaxDBSize    int64

	fs *flag.FlagSet
}

// onlyOn is the engine each engine-specific flag means something on. A
// flag given explicitly for another engine is reported by Ignored.
var onlyOn = map[string]Kind{
	"commit-settle": Bolt,
	"max-db-size":   Bolt,
}

// AddFlags defines --db, --commit-settle and --max-db-size on fs.
func AddFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.DB, "db", "./fenceq.db", "bbolt file holding the queue (created if missing), or a postgres:// URL shared by several servers")
	fs.DurationVar(&f.CommitSettle, "commit-settle", 500*time.Microsecond, "under load, how long a commit may wait for the previous commit's callers to come back (0: never wait); bbolt only")
	fs.Int64Var(&f.MaxDBSize, "max-db-size", defaultMaxDBSize(), "largest the database file may grow, in bytes (0: no limit); a write past it is refused with resource_exhausted, reads go on. Default 512 MiB on 32-bit builds, none on 64-bit; bbolt only")
	return f
}

// Kind is the engine --db names.
func (f *Flags) Kind() Kind { return Of(f.DB) }

// Options checks the flags and turns them into Options with rules. An
// error is a usage mistake (a --max-db-size out of range).
func (f *Flags) Options(rules db.Rules) (Options, error) {
	maxSize, err := maxDBSizeOption(f.MaxDBSize)
	if err != nil {
		return Options{}, err
	}
	return Options{Rules: rules, CommitSettle: f.CommitSettle, MaxSize: maxSize}, nil
}

// IgnoredFlag is a flag given explicitly, on the command line or in its
// FENCEQ_ variable, that means nothing on the engine --db picked.
type IgnoredFlag struct {
	Flag   string // without dashes: "max-db-size"
	Engine Kind   // the engine that ignores it
	Only   Kind   // the engine it means something on
}

// Env is the flag's environment variable: FENCEQ_MAX_DB_SIZE.
func (i IgnoredFlag) Env() string {
	return "FENCEQ_" + strings.ToUpper(strings.ReplaceAll(i.Flag, "-", "_"))
}

// String is the start-up warning: it names the flag and both engines.
func (i IgnoredFlag) String() string {
	return fmt.Sprintf("--%s (%s) means nothing on the %s engine: it is a %s setting, ignored", i.Flag, i.Env(), i.Engine, i.Only)
}

// Ignored lists the flags given explicitly (on the command line, or by a
// FENCEQ_ variable that ParseWithEnv applied) that mean nothing on the
// engine --db picks, in flag order. They are warnings, not refusals:
// replicas share environments during upgrades.
func (f *Flags) Ignored() []IgnoredFlag {
	kind := f.Kind()
	var out []IgnoredFlag
	f.fs.Visit(func(fl *flag.Flag) { // Visit: only the flags that were set
		if only, ok := onlyOn[fl.Name]; ok && only != kind {
			out = append(out, IgnoredFlag{Flag: fl.Name, Engine: kind, Only: only})
		}
	})
	return out
}

// defaultMaxDBSize is --max-db-size's default. A 32-bit process maps the
// whole file into at most 2-3 GiB of address space that the Go heap, the
// stacks and the binary share, and bbolt remaps it at twice the size as it
// grows: a remap that cannot get the space leaves the store unusable. 512 MiB
// keeps the map (whose size is the file's rounded up to a power of two) well
// inside a 2 GiB/2 GiB kernel split. 64-bit builds have no such limit.
func defaultMaxDBSize() int64 {
	if strconv.IntSize == 32 {
		return 512 << 20
	}
	return 0
}

// maxDBSizeOption checks --max-db-size and turns it into Options.MaxSize.
func maxDBSizeOption(n int64) (int, error) {
	if n < 0 || n > math.MaxInt {
		return 0, fmt.Errorf("--max-db-size must be between 0 (no limit) and %d on this platform, got %d", math.MaxInt, n)
	}
	if n != 0 && n < 1<<20 {
		return 0, fmt.Errorf("--max-db-size must be 0 (no limit) or at least 1048576 (1 MiB), got %d", n)
	}
	return int(n), nil
}
