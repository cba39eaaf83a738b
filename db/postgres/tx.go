package postgres

import (
	"context"
	"sync/atomic"

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
// costs a round trip of its own. A savepoint marked pending is sent in the
// same round trip as the next statement.
type batchTx struct {
	conn  *pgxpool.Conn
	sp    bool           // a savepoint is due before the next statement
	trips *atomic.Uint64 // round trips to the server, counted for tests
}

const savepointSQL = `SAVEPOINT fenceq_op`

func (t *batchTx) trip() {
	if t.trips != nil {
		t.trips.Add(1)
	}
}

// withSavepoint starts a pipeline of the pending savepoint and sql.
func (t *batchTx) withSavepoint(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	t.sp = false
	b := &pgx.Batch{}
	b.Queue(savepointSQL)
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (t *batchTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.trip()
	if !t.sp {
		return t.conn.Exec(ctx, sql, args...)
	}
	br, err := t.withSavepoint(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *batchTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.trip()
	if !t.sp {
		return t.conn.Query(ctx, sql, args...)
	}
	br, err := t.withSavepoint(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *batchTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t.trip()
	if !t.sp {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	br, err := t.withSavepoint(ctx, sql, args)
	return batchRow{br: br, err: err}
}

func (t *batchTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.trip()
	if t.sp {
		t.sp = false
		nb := &pgx.Batch{}
		nb.Queue(savepointSQL)
		nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
		br := t.conn.SendBatch(ctx, nb)
		_, _ = br.Exec() // a failed savepoint fails the statements after it too
		return br
	}
	return t.conn.SendBatch(ctx, b)
}

// batchRows are the rows of a statement pipelined after a savepoint: the
// pipeline ends with them, so that the connection is free for the next
// statement once they are read.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
}

func (r *batchRows) end() {
	if !r.closed {
		r.closed = true
		r.Rows.Close()
		_ = r.br.Close()
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.end()
	return false
}

func (r *batchRows) Close() { r.end() }

type batchRow struct {
	br  pgx.BatchResults
	err error
}

func (r batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}
