package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A replica checks the minimum writer version at Open, and again in every
// commit: the database records the oldest fenceq release allowed to write
// to it (fenceq_audit_head.min_writer, migration 0005). A newer build's
// migration only expands the schema (docs/operations.md, "Compatibility
// between releases"), so a replica of the release before keeps working on
// it; a migration that brings in what older builds cannot honour raises
// the minimum to its build's version. A replica built below the minimum
// must neither apply its older rules to the newer schema nor report
// figures it no longer reads right. It notices without a statement of its
// own: every writing batch reads the minimum (and the schema version) with
// the audit head row it locks anyway (finishBatch), a statement that fails
// for a column, table or function that is not there makes it look
// (writeError, readError), and Ping reads both in place of SELECT 1. Once
// it has seen a minimum above its own version, the replica is outdated for
// good: every write and read is answered 503 unavailable naming both
// versions (at the pool, before any statement), and Ping fails, so that
// /readyz drains it.

// schemaGate holds the newest schema version and the highest minimum
// writer version seen in the database, and this build's version.
type schemaGate struct {
	seen      atomic.Int64
	minWriter atomic.Pointer[string]
	build     string // this build's version (Options.Version); "" is never outdated
}

// err is the answer of an outdated replica, or nil.
func (g *schemaGate) err() error {
	p := g.minWriter.Load()
	if p == nil || g.build == "" || !versionLess(g.build, *p) {
		return nil
	}
	return db.Errorf(db.CodeUnavailable, "the PostgreSQL database requires fenceq %s or newer to write to it (its minimum writer version, raised by a newer fenceq's migration); this fenceq is %s and serves nothing more: replace it with %s or newer", *p, g.build, *p)
}

// saw records the schema version and the minimum writer version read from
// the database and returns the outdated answer when the minimum is above
// this build's version.
func (g *schemaGate) saw(version int64, minWriter string) error {
	for {
		old := g.seen.Load()
		if old >= version || g.seen.CompareAndSwap(old, version) {
			break
		}
	}
	for {
		old := g.minWriter.Load()
		if old != nil && !versionLess(*old, minWriter) {
			break
		}
		if g.minWriter.CompareAndSwap(old, &minWriter) {
			break
		}
	}
	return g.err()
}

// versionLess reports whether release version a is below b, comparing
// vMAJOR.MINOR.PATCH numerically; what follows the patch number is
// ignored, and a version that does not parse is below every one that does.
func versionLess(a, b string) bool {
	pa, oka := parseVersion(a)
	pb, okb := parseVersion(b)
	if !oka || !okb {
		return !oka && okb
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return false
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	rest, ok := strings.CutPrefix(v, "v")
	if !ok {
		return out, false
	}
	for i := range out {
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if end == 0 {
			return out, false
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil {
			return out, false
		}
		out[i] = n
		rest = rest[end:]
		if i < 2 {
			if !strings.HasPrefix(rest, ".") {
				return out, false
			}
			rest = rest[1:]
		}
	}
	return out, true
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

// gateSQL reads what the gate needs: the schema version and the minimum
// writer version.
const gateSQL = `SELECT ` + schemaVersionSQL + `, min_writer FROM fenceq_audit_head WHERE id = 1`

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

// recheckSchema reads the minimum writer version after a statement failed
// for a missing object, and returns the outdated answer if it is above
// this build's version; nil otherwise (the error is then a fault of its
// own).
func (s *Store) recheckSchema(err error) error {
	if !missingObject(err) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithValue(s.stopped, gateKey{}, true), 5*time.Second)
	defer cancel()
	var v int64
	var minWriter string
	if s.pool.QueryRow(ctx, gateSQL).Scan(&v, &minWriter) != nil {
		return nil
	}
	return s.gate.saw(v, minWriter)
}
