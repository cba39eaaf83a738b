package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlTx is what a mutation writes through: a batch's transaction, or a
// pgx.Tx (copy).
type sqlTx interface {
	querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// batchTx is a batch's transaction on one connection of the pool, opened
// and ended by statements the batch pipelines with its others (BEGIN with
// the batch's first reads, COMMIT with its last writes), so that neither
// costs a round trip of its own. It has no savepoints: a batch's
// mutations write through its view (batchView) and a fault fails the
// batch, which then runs each mutation alone (Store.alone).
type batchTx struct {
	conn  *pgxpool.Conn
	trips *atomic.Uint64 // round trips to the server, counted for tests
	stmts *atomic.Uint64 // statements sent, counted for tests
	// head is the audit head once the batch locked it (at its start, if
	// no other replica's batch held it; else in finishBatch), at locked.
	head   *headRow
	locked time.Time
	need   batchNeed // what its first round trip locked and read
	// early: the batch decides against an early read (early.go) and has
	// no transaction open until finishEarly; a statement of its own before
	// then fails it with errEarlyStale (it runs again without the read).
	early bool
}

func (t *batchTx) trip() { t.tripOf(1) }

// tripOf counts a round trip of n statements.
func (t *batchTx) tripOf(n int) {
	if t.trips != nil {
		t.trips.Add(1)
	}
	if t.stmts != nil {
		t.stmts.Add(uint64(n))
	}
}

func (t *batchTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.early {
		return pgconn.CommandTag{}, errEarlyStale
	}
	t.trip()
	return t.conn.Exec(ctx, sql, args...)
}

func (t *batchTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.early {
		return nil, errEarlyStale
	}
	t.trip()
	return t.conn.Query(ctx, sql, args...)
}

func (t *batchTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.early {
		return failedRow{errEarlyStale}
	}
	t.trip()
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *batchTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.early {
		return failedBatch{errEarlyStale}
	}
	t.tripOf(b.Len())
	return t.conn.SendBatch(ctx, b)
}

// failedRow and failedBatch answer every read with err.
type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }

type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return failedRow(b) }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }
