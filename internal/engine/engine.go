// Package engine is the one place that picks a storage engine: "fenceq
// serve", the offline commands (audit verify --db, the check of a
// downloaded backup) and "fenceq copy" open their stores here, and no other
// package but test helpers imports db/bolt or db/postgres
// (docs/ARCHITECTURE.md; TestImportRules enforces it).
//
// A postgres:// or postgresql:// URL is a PostgreSQL database that several
// servers may share; anything else is a bbolt file.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/internal/buildinfo"
)

// Kind is a storage engine.
type Kind int

const (
	// Bolt is the bbolt engine: one file, one server.
	Bolt Kind = iota
	// Postgres is the PostgreSQL engine: one database, several servers.
	Postgres
)

// String is the engine's name as warnings and logs show it.
func (k Kind) String() string {
	if k == Postgres {
		return "PostgreSQL"
	}
	return "bbolt"
}

// Of is the engine dsn (a --db value) names.
func Of(dsn string) Kind {
	if postgres.IsURL(dsn) {
		return Postgres
	}
	return Bolt
}

// Options are what a server's store is opened with: the rules every engine
// keeps, and the settings that mean something on one engine only (the
// others ignore them; Flags warns when one is given for the wrong engine).
type Options struct {
	Rules db.Rules
	// CommitSettle is bbolt's bolt.Options.SettleTime as --commit-settle
	// gives it: 0 or less never waits.
	CommitSettle time.Duration
	// MaxSize is bbolt's bolt.Options.MaxSize: 0 means no bound.
	MaxSize int
	// NoSync is bbolt's bolt.Options.NoSync, for the power-loss test's
	// control only.
	NoSync bool
}

// Open opens the store dsn names for a server: a PostgreSQL database, or a
// bbolt file (created if missing). A bbolt file that another process holds
// is bolt.ErrLocked, wrapped with a hint.
func Open(ctx context.Context, dsn string, opts Options) (db.Store, error) {
	if Of(dsn) == Postgres {
		return postgres.Open(ctx, dsn, postgres.Options{Rules: opts.Rules, Version: buildinfo.WriterVersion()})
	}
	store, err := bolt.Open(dsn, bolt.Options{Rules: opts.Rules, SettleTime: settleOption(opts.CommitSettle),
		MaxSize: opts.MaxSize, NoSync: opts.NoSync})
	if errors.Is(err, bolt.ErrLocked) {
		return nil, fmt.Errorf("%w; is another fenceq serving this file?", err)
	}
	if err != nil {
		return nil, err
	}
	return store, nil
}

// settleOption maps --commit-settle to bolt.Options.SettleTime, where 0 means
// the default and a negative value turns the wait off.
func settleOption(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// Display is dsn as logs show it: a URL without its password.
func Display(dsn string) string {
	if Of(dsn) != Postgres {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(malformed URL)"
	}
	return u.Redacted()
}
