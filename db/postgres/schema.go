package postgres

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A replica checks the schema version at Open. A newer build may migrate
// the database while this replica runs: from then on it must neither apply
// its older rules to the newer schema nor report figures it no longer
// reads right. It notices without a statement of its own: every writing
// batch reads the schema version with the audit head row it locks anyway
// (finishBatch), a statement that fails for a column, table or function
// that is not there makes it look (writeError, readError), and Ping reads
// the version in place of SELECT 1. Once it has seen a newer version, the
// replica is outdated for good: every write and read is answered 503
// unavailable naming both versions (at the pool, before any statement),
// and Ping fails, so that /readyz drains it.

// schemaGate holds the newest schema version seen in the database.
type schemaGate struct{ seen atomic.Int64 }

// err is the answer of an outdated replica, or nil.
func (g *schemaGate) err() error {
	v := g.seen.Load()
	if v <= int64(SchemaVersion()) {
		return nil
	}
	return db.Errorf(db.CodeUnavailable, "the PostgreSQL database was migrated to schema version %d by a newer fenceq; this fenceq knows versions up to %d and serves nothing more: replace it with a build that knows version %d", v, SchemaVersion(), v)
}

// saw records the schema version read from the database and returns the
// outdated answer when it is newer than this build's.
func (g *schemaGate) saw(version int64) error {
	for {
		old := g.seen.Load()
		if old >= version || g.seen.CompareAndSwap(old, version) {
			break
		}
	}
	return g.err()
}

// gateKey marks a context whose statements pass an outdated gate: the
// look at the schema version itself.
type gateKey struct{}

// prepareConn is the pool's PrepareConn: an outdated replica's statements
// are refused before they are sent.
func (g *schemaGate) prepareConn(ctx context.Context, _ *pgx.Conn) (bool, error) {
	if ctx.Value(gateKey{}) != nil {
		return true, nil
	}
	return true, g.err()
}

// schemaVersionSQL reads the schema version (an index probe of
// fenceq_schema's key).
const schemaVersionSQL = `(SELECT coalesce(max(version), 0) FROM fenceq_schema)`

// missingObject reports whether err is a statement refused for a column,
// table, function or other object that does not exist: what an older
// replica meets after a newer migration renamed or dropped one.
func missingObject(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "42703", "42P01", "42883", "42704": // undefined column, table, function, object
		return true
	}
	return false
}

// recheckSchema reads the schema version after a statement failed for a
// missing object, and returns the outdated answer if the database is
// newer than this build; nil otherwise (the error is then a fault of its
// own).
func (s *Store) recheckSchema(err error) error {
	if !missingObject(err) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithValue(s.stopped, gateKey{}, true), 5*time.Second)
	defer cancel()
	var v int64
	if s.pool.QueryRow(ctx, `SELECT `+schemaVersionSQL).Scan(&v) != nil {
		return nil
	}
	return s.gate.saw(v)
}
