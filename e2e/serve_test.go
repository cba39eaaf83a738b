package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

func TestServeWalksAJobThroughItsLifeAndShutsDownCleanly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	p, base := startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")

	st, job := call(t, "POST", base+"/v1/jobs", `{"queue":"email","payload":{"to":"a@example.com"}}`)
	wantStatus(t, "enqueue", st, job, http.StatusCreated)
	id := uint64(job["id"].(float64))

	st, claimed := call(t, "POST", base+"/v1/claim", `{"worker":"w1","queues":["email"],"lease_ms":30000}`)
	wantStatus(t, "claim", st, claimed, http.StatusOK)
	if uint64(claimed["id"].(float64)) != id || claimed["fencing_token"] != float64(1) {
		t.Fatalf("claim = %v, want job %d with fencing_token 1", claimed, id)
	}

	jobURL := fmt.Sprintf("%s/v1/jobs/%d", base, id)
	st, hb := call(t, "POST", jobURL+"/heartbeat", `{"worker":"w1","fencing_token":1,"lease_ms":30000}`)
	wantStatus(t, "heartbeat", st, hb, http.StatusOK)
	st, stale := call(t, "POST", jobURL+"/heartbeat", `{"worker":"w1","fencing_token":4294967296}`)
	wantStatus(t, "heartbeat with a token above u32 max", st, stale, http.StatusBadRequest)

	st, done := call(t, "POST", jobURL+"/complete", `{"worker":"w1","fencing_token":1,"result":{"sent":true},"attestation":{"sig":"abc"}}`)
	wantStatus(t, "complete", st, done, http.StatusOK)
	if done["state"] != "completed" {
		t.Fatalf("complete = %v, want state completed", done)
	}

	// A second server on the same file is refused quickly and clearly.
	second := start(t, nil, "serve", "--db", path, "--listen", "127.0.0.1:0")
	if code := second.exit(t, 5*time.Second); code == 0 {
		t.Fatalf("second fenceq on %s exited 0, want non-zero; stderr:\n%s", path, second.stderr)
	}
	if msg := second.stderr.String(); !strings.Contains(msg, "locked") {
		t.Fatalf("second fenceq stderr = %q, want a message containing \"locked\"", msg)
	}
	// The first one is still serving.
	st, got := call(t, "GET", jobURL, "")
	wantStatus(t, "GET after the second instance", st, got, http.StatusOK)

	// SIGTERM: exit 0 and a file that reopens cleanly with everything in it.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("fenceq after SIGTERM exited %d, want 0; stderr:\n%s", code, p.stderr)
	}
	store, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatalf("db.Open after shutdown: %v", err)
	}
	defer store.Close()
	if err := store.Check(); err != nil {
		t.Fatalf("Check() after shutdown = %v", err)
	}
	j, err := store.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("GetJob(%d) after shutdown: %v", id, err)
	}
	if j.State != db.StateCompleted || j.Attempts != 1 || string(j.Result) != `{"sent":true}` || string(j.Attestation) != `{"sig":"abc"}` {
		t.Fatalf("job after shutdown = state %s attempts %d result %s attestation %s, want completed, 1, {\"sent\":true}, {\"sig\":\"abc\"}",
			j.State, j.Attempts, j.Result, j.Attestation)
	}
	if rep, err := store.VerifyAudit(context.Background()); err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() after shutdown = %+v, %v; want OK", rep, err)
	}
}

func TestServeTakesItsFlagsFromTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env.db")
	_, base := startServing(t, []string{"FENCEQ_REQUIRE_FENCING=true", "FENCEQ_DB=" + path, "FENCEQ_LISTEN=127.0.0.1:0"})
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("FENCEQ_DB=%s: the file was not created: %v", path, err)
	}

	st, job := call(t, "POST", base+"/v1/jobs", `{}`)
	wantStatus(t, "enqueue", st, job, http.StatusCreated)
	st, claimed := call(t, "POST", base+"/v1/claim", `{"worker":"w1"}`)
	wantStatus(t, "claim", st, claimed, http.StatusOK)
	hbURL := fmt.Sprintf("%s/v1/jobs/%v/heartbeat", base, claimed["id"])
	st, body := call(t, "POST", hbURL, `{"worker":"w1"}`)
	wantStatus(t, "heartbeat without a token under FENCEQ_REQUIRE_FENCING=true", st, body, http.StatusBadRequest)
	if errorCode(body) != "invalid_argument" {
		t.Fatalf("heartbeat without a token: body %v, want code invalid_argument", body)
	}
	st, body = call(t, "POST", hbURL, `{"worker":"w1","fencing_token":1}`)
	wantStatus(t, "heartbeat with the token", st, body, http.StatusOK)

	// A flag on the command line wins over the environment.
	_, base2 := startServing(t, []string{"FENCEQ_REQUIRE_FENCING=true"}, "--require-fencing=false",
		"--db", filepath.Join(t.TempDir(), "flag.db"), "--listen", "127.0.0.1:0")
	call(t, "POST", base2+"/v1/jobs", `{}`)
	st, claimed = call(t, "POST", base2+"/v1/claim", `{"worker":"w1"}`)
	wantStatus(t, "claim", st, claimed, http.StatusOK)
	st, body = call(t, "POST", fmt.Sprintf("%s/v1/jobs/%v/heartbeat", base2, claimed["id"]), `{"worker":"w1"}`)
	wantStatus(t, "heartbeat without a token under --require-fencing=false", st, body, http.StatusOK)

	// A bad value in the environment is a usage error naming the variable.
	code, _, stderr := runFenceq(t, []string{"FENCEQ_REQUIRE_FENCING=maybe"}, "serve",
		"--db", filepath.Join(t.TempDir(), "bad.db"), "--listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "FENCEQ_REQUIRE_FENCING") {
		t.Fatalf("FENCEQ_REQUIRE_FENCING=maybe: exit %d, stderr %q; want 2 and a message naming the variable", code, stderr)
	}
}

func TestServeRefusesAFileItCannotUse(t *testing.T) {
	dir := t.TempDir()
	garbage := make([]byte, 64<<10)
	if _, err := rand.Read(garbage); err != nil {
		t.Fatal(err)
	}
	garbagePath := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbagePath, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	textPath := filepath.Join(dir, "notes.txt")
	text := []byte("these are my notes, not a queue\n")
	if err := os.WriteFile(textPath, text, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		path     string
		contents []byte // the file must be left as it was
		mentions string
	}{
		{"random bytes", garbagePath, garbage, "not a fenceq database"},
		{"a short text file", textPath, text, "not a fenceq database"},
		{"a directory", dir, nil, dir},
		{"a file under a missing directory", filepath.Join(dir, "missing", "q.db"), nil, "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runFenceq(t, nil, "serve", "--db", tt.path, "--listen", "127.0.0.1:0")
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stderr:\n%s", stderr)
			}
			if strings.Contains(stderr, "fenceq serving") {
				t.Errorf("it started serving on an unusable file; stderr:\n%s", stderr)
			}
			if !strings.Contains(stderr, tt.mentions) {
				t.Errorf("stderr = %q, want a message mentioning %q", stderr, tt.mentions)
			}
			if tt.contents != nil {
				if got, err := os.ReadFile(tt.path); err != nil || !bytes.Equal(got, tt.contents) {
					t.Errorf("%s was changed (%d bytes, err %v); it must be left alone", tt.path, len(got), err)
				}
			}
		})
	}
}

func TestHelpAndUsageErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string // must contain
		stderr   string // must contain
		notInOut string // must not be in either stream
	}{
		{"help", []string{"help"}, 0, "Usage:", "", ""},
		{"--help", []string{"--help"}, 0, "Usage:", "", ""},
		{"serve --help", []string{"serve", "--help"}, 0, "-require-fencing", "", "fenceq:"},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`, ""},
		{"unknown flag", []string{"serve", "--no-such-flag"}, 2, "", "no-such-flag", ""},
		{"stray argument", []string{"serve", "extra"}, 2, "", "extra", ""},
		{"default lease above max lease", []string{"serve", "--default-lease", "2h", "--max-lease", "1h"}, 2, "", "--default-lease", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runFenceq(t, nil, tt.args...)
			if code != tt.code {
				t.Errorf("fenceq %v exited %d, want %d; stdout %q stderr %q", tt.args, code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("fenceq %v stdout = %q, want it to contain %q", tt.args, stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("fenceq %v stderr = %q, want it to contain %q", tt.args, stderr, tt.stderr)
			}
			if tt.notInOut != "" && strings.Contains(stdout+stderr, tt.notInOut) {
				t.Errorf("fenceq %v printed %q; stdout %q stderr %q", tt.args, tt.notInOut, stdout, stderr)
			}
		})
	}
}

// TestServeOnATakenPortCreatesNoFile: a start that fails because the port
// is taken exits non-zero naming the address, and leaves no --db file.
func TestServeOnATakenPortCreatesNoFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	path := filepath.Join(t.TempDir(), "new.db")
	code, _, stderr := runFenceq(t, nil, "serve", "--db", path, "--listen", ln.Addr().String())
	if code == 0 || !strings.Contains(stderr, ln.Addr().String()) {
		t.Errorf("serve on a taken port: exit %d, stderr %q; want non-zero naming %s", code, stderr, ln.Addr())
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("serve on a taken port left %s behind (stat: %v)", path, err)
	}
}
