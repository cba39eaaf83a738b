package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// backup serves GET /v1/backup: a consistent snapshot of the database file
// (bbolt Tx.WriteTo in one read transaction), as application/octet-stream.
// The snapshot is a complete fenceq file: stop the server, put it in place
// of --db and start again to restore.
//
// Headers are sent with the first byte of the snapshot, so an error before
// it is an ordinary JSON error. An error after it cannot change the status
// any more: the response is aborted (no final chunk), which a client sees
// as a truncated body rather than a complete file.
func (s *Server) backup(c echo.Context) error {
	res := c.Response()
	name := "fenceq-backup-" + time.Now().UTC().Format("20060102T150405Z") + ".db"
	w := &backupWriter{res: res, rc: http.NewResponseController(res), name: name, stall: s.cfg.StallTimeout}
	b, ok := s.engine.(db.Backuper)
	if !ok {
		return &Error{http.StatusNotFound, "not_found", "this store cannot write a backup"}
	}
	if c.Request().Method == http.MethodHead {
		return w.headOnly(c.Request().Context(), s.store.Ping)
	}
	n, err := b.Backup(c.Request().Context(), w)
	if err == nil {
		s.log.InfoContext(c.Request().Context(), "backup", "principal", principalOf(c), "bytes", n)
		return nil
	}
	if !w.started {
		return err
	}
	s.log.WarnContext(c.Request().Context(), "backup aborted after it started", "principal", principalOf(c), "bytes", n, "err", err)
	// Tell net/http to drop the connection without completing the body.
	panic(http.ErrAbortHandler)
}

// backupWriter sends the response headers with the first write and extends
// the write deadline before every write, by stall (Config.StallTimeout): a
// download may take longer than the server's write timeout as a whole, as
// long as the client keeps reading. A client that stops reading is cut
// off after stall, so that it cannot hold the store's read transaction
// open for longer (on bbolt a commit that grows the file waits for it).
type backupWriter struct {
	res         *echo.Response
	rc          *http.ResponseController
	name        string
	contentType string // default application/octet-stream
	stall       time.Duration
	started     bool
}

// headOnly answers a HEAD of a streamed download with the headers GET
// would send, after a read of the store (Ping) tells that GET could
// start, without reading the snapshot: a monitor's HEAD must not cost a
// whole file.
func (w *backupWriter) headOnly(ctx context.Context, ping func(context.Context) error) error {
	if err := ping(ctx); err != nil {
		return err
	}
	_, err := w.Write(nil)
	return err
}

// stallChunk is the most one deadline covers: a client that keeps
// reading slowly moves it often enough, one that stops is found out
// within stall of its last read.
const stallChunk = 32 << 10

func (w *backupWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		h := w.res.Header()
		ct := w.contentType
		if ct == "" {
			ct = echo.MIMEOctetStream
		}
		h.Set(echo.HeaderContentType, ct)
		h.Set(echo.HeaderContentDisposition, `attachment; filename="`+w.name+`"`)
		h.Set("Cache-Control", "no-store")
		w.res.WriteHeader(http.StatusOK)
	}
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), stallChunk)]
		// Not every ResponseWriter supports deadlines (httptest's recorder
		// does not); the write goes on without one there.
		if err := w.rc.SetWriteDeadline(time.Now().Add(w.stall)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return n, err
		}
		m, err := w.res.Write(chunk)
		n += m
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}
