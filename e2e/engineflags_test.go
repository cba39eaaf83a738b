package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// TestServe_AFlagOfTheOtherEngineIsAWarningNotARefusal: bbolt's
// --commit-settle (command line) and --max-db-size (FENCEQ_MAX_DB_SIZE)
// given to a PostgreSQL server each get a warning at start naming the flag
// and the engine, and the server serves; on bbolt the same flags get none.
func TestServe_AFlagOfTheOtherEngineIsAWarningNotARefusal(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		p, base := startServing(t, []string{"FENCEQ_MAX_DB_SIZE=1048576"}, "--db", filepath.Join(t.TempDir(), "q.db"),
			"--listen", "127.0.0.1:0", "--commit-settle", "1ms")
		if status, body := call(t, "POST", base+"/v1/jobs", `{"queue":"q"}`); status != http.StatusCreated {
			t.Fatalf("enqueue = %d %v, want 201", status, body)
		}
		if strings.Contains(p.stderr.String(), "means nothing") {
			t.Errorf("bbolt warned about its own flags:\n%s", p.stderr)
		}
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		p, base := startServing(t, []string{"FENCEQ_MAX_DB_SIZE=1048576"}, "--db", pgtest.NewSchema(t),
			"--listen", "127.0.0.1:0", "--commit-settle", "1ms")
		if status, body := call(t, "POST", base+"/v1/jobs", `{"queue":"q"}`); status != http.StatusCreated {
			t.Fatalf("enqueue = %d %v, want 201", status, body)
		}
		stderr := p.stderr.String()
		for _, want := range []string{
			`--commit-settle (FENCEQ_COMMIT_SETTLE) means nothing on the PostgreSQL engine`,
			`--max-db-size (FENCEQ_MAX_DB_SIZE) means nothing on the PostgreSQL engine`,
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr has no warning %q:\n%s", want, stderr)
			}
		}
		if strings.Contains(stderr, "--max-lease") || strings.Contains(stderr, "--listen (") {
			t.Errorf("a flag of every engine was warned about:\n%s", stderr)
		}
	})
}
