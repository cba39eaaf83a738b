package api

import (
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
	w.head = c.Request().Method == http.MethodHead
	n, err := b.Backup(c.Request().Context(), w)
	if err == nil || w.headDone(err) {
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
	head        bool // a HEAD: send the headers at the first write, then stop the read (errHeadOnly)
}

// errHeadOnly ends the read of a HEAD's download at its first write: the
// headers GET would send are out, and the store, which got as far as
// writing (so GET would have answered 200), reads no more of its snapshot.
var errHeadOnly = errors.New("api: HEAD: the headers are sent")

// headDone reports whether a HEAD's read ended at its first write (the
// store may wrap errHeadOnly without %w, as bbolt does: w knows it sent
// it).
func (w *backupWriter) headDone(err error) bool { return w.head && w.started && err != nil }

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
	if w.head {
		return 0, errHeadOnly
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
