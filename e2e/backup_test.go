//go:build linux

package e2e

// A backup taken under load is a consistent, complete file
// (docs/guarantees.md).

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slowReader reads a response body in small pieces with pauses, so that a
// backup's read transaction stays open while writers commit.
type slowReader struct{ r io.Reader }

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return s.r.Read(p[:min(len(p), 16<<10)])
}

func TestBackup_UnderLoadHoldsEverythingAcknowledgedBeforeIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.db")
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()
	run := randomHex(t, 4)
	queue := "backup-" + run
	acks := newCrashAcks()
	st := &crashStats{}
	stop := startCrashLoad([]*crashClient{srv.client}, acks, st, queue, run, 2, 2)
	defer stop()

	type backup struct {
		file      string
		enqueued  map[uint64]string
		completed map[uint64]crashCompletion
		bytes     int64
	}
	var backups []backup
	for i := range 3 {
		time.Sleep(300 * time.Millisecond)
		b := backup{file: filepath.Join(dir, fmt.Sprintf("backup-%d.db", i)),
			enqueued: map[uint64]string{}, completed: map[uint64]crashCompletion{}}
		acks.mu.Lock()
		for id, p := range acks.enqueued {
			b.enqueued[id] = p
		}
		for id, c := range acks.completed {
			b.completed[id] = c
		}
		acks.mu.Unlock()

		resp, err := http.Get(*srv.client.base.Load() + "/v1/backup")
		if err != nil {
			t.Fatalf("GET /v1/backup: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("GET /v1/backup: %d %s", resp.StatusCode, raw)
		}
		f, err := os.Create(b.file)
		if err != nil {
			t.Fatal(err)
		}
		b.bytes, err = io.Copy(f, slowReader{resp.Body})
		resp.Body.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("reading the backup: %v", err)
		}
		backups = append(backups, b)
	}
	stop()
	if err := srv.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.proc.exit(t, 30*time.Second)
	// A backup holds the leases running when it was taken; checkAcks
	// refuses a lease still running when it looks, so let the last ones end.
	time.Sleep(crashLease + 100*time.Millisecond)

	var figures []string
	for i, b := range backups {
		if len(b.enqueued) == 0 {
			t.Fatalf("backup %d: nothing was acknowledged before it; the load did not run", i)
		}
		states := checkAcks(t, b.file, &crashAcks{enqueued: b.enqueued, completed: b.completed}, fmt.Sprintf("backup %d", i))
		total := 0
		for _, n := range states {
			total += n
		}
		figures = append(figures, fmt.Sprintf("backup %d: %d bytes, %d jobs (%d acknowledged before it, %d completions)",
			i, b.bytes, total, len(b.enqueued), len(b.completed)))
	}
	t.Logf("backup under load (%d enqueues and %d completions acknowledged in all): %s; each opens, passes Check() and the audit chain, and holds everything acknowledged before it began",
		len(acks.enqueued), len(acks.completed), strings.Join(figures, "; "))
}
