package bolt

import (
	"context"
	"io"

	bbolt "go.etcd.io/bbolt"
)

// Backup writes a consistent snapshot of the whole database file to w and
// returns the number of bytes written. It runs bbolt's Tx.WriteTo inside one
// read transaction, so the copy is the file as of one commit: writers go on
// meanwhile and none of their later commits is in it. The copy is a
// complete bbolt file that Open accepts as it is.
//
// The read transaction lasts as long as the copy; while it is open, a
// commit that needs to grow the file's memory map waits for it. A slow
// reader of w therefore slows writers down only when the file grows.
//
// Backup stops when ctx ends (the error is ctx's) and returns ErrClosed
// on a closed store; errors from w are returned as they are.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	err := s.view(func(tx *bbolt.Tx) error {
		var err error
		n, err = tx.WriteTo(ctxWriter{ctx: ctx, w: w})
		return err
	})
	return n, err
}

// ctxWriter fails writes once ctx has ended, so that a copy to a client
// that went away does not hold its read transaction to the end.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (cw ctxWriter) Write(p []byte) (int, error) {
	if err := cw.ctx.Err(); err != nil {
		return 0, err
	}
	return cw.w.Write(p)
}
