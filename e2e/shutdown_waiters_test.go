//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// SIGTERM to a replica with long-poll claims (wait_ms 20000) and waiting
// lease acquires, on each engine: every waiter is answered (204, 409 as a
// timed-out acquire) and the process exits within 1 s of the signal,
// instead of holding the exit for the waits (issue 30 item 1: PostgreSQL
// answered them only when their waits ran out, 19 s later).
func TestShutdown_SIGTERMAnswersEveryWaiterAndExitsWithinASecond(t *testing.T) {
	for _, engine := range []string{"bolt", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dsn := filepath.Join(t.TempDir(), "f.db")
			if engine == "postgres" {
				dsn = pgtest.NewSchema(t)
			}
			p, base := startServing(t, nil, "--db", dsn, "--listen", "127.0.0.1:0", "--shutdown-timeout", "30s")
			if st, body := call(t, "POST", base+"/v1/leases/held/acquire", `{"holder":"a","ttl_ms":60000}`); st != http.StatusOK {
				t.Fatalf("acquire: %d %v", st, body)
			}
			type answer struct {
				what   string
				status int
				body   string
				err    error
				at     time.Time
			}
			const each = 4
			answers := make(chan answer, 2*each)
			slow := &http.Client{Timeout: 40 * time.Second}
			post := func(what, path, body string) {
				resp, err := slow.Post(base+path, "application/json", strings.NewReader(body))
				a := answer{what: what, err: err}
				if err == nil {
					raw, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					a.status, a.body, a.err = resp.StatusCode, string(raw), rerr
				}
				a.at = time.Now()
				answers <- a
			}
			for i := range each {
				go post("claim", "/v1/claim", fmt.Sprintf(`{"worker":"w%d","queues":["empty"],"wait_ms":20000}`, i))
				go post("acquire", "/v1/leases/held/acquire", fmt.Sprintf(`{"holder":"b%d","ttl_ms":1000,"wait_ms":20000}`, i))
			}
			// Give every request time to reach its wait (nothing can answer
			// them before the signal: the queue is empty, the lease held for
			// a minute).
			time.Sleep(700 * time.Millisecond)
			select {
			case a := <-answers:
				t.Fatalf("%s answered %d %s %v before the signal", a.what, a.status, a.body, a.err)
			default:
			}
			signalled := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.exit(t, 25*time.Second)
			exited := time.Now()
			if code != 0 {
				t.Fatalf("fenceq exited %d after SIGTERM; stderr:\n%s", code, p.stderr)
			}
			if took := exited.Sub(signalled); took > time.Second {
				t.Errorf("fenceq exited %v after SIGTERM, want within 1s", took.Round(time.Millisecond))
			}
			for range 2 * each {
				var a answer
				select {
				case a = <-answers:
				case <-time.After(5 * time.Second):
					t.Fatal("a waiter got no answer at all")
				}
				switch {
				case a.err != nil:
					t.Errorf("%s: %v (no reply)", a.what, a.err)
				case a.what == "claim" && a.status != http.StatusNoContent:
					t.Errorf("claim answered %d %s, want 204", a.status, a.body)
				case a.what == "acquire" && (a.status != http.StatusConflict || !strings.Contains(a.body, "failed_precondition")):
					t.Errorf("acquire answered %d %s, want 409 failed_precondition (still held)", a.status, a.body)
				}
				if a.err == nil && a.at.After(exited) {
					t.Errorf("%s answered %v after the exit", a.what, a.at.Sub(exited))
				}
			}
			t.Logf("%s: exit 0 %v after SIGTERM, %d waiters answered", engine, exited.Sub(signalled).Round(time.Millisecond), 2*each)
		})
	}
}
