//go:build linux

package e2e

// A disk that cannot be written is a clear error (docs/guarantees.md): a
// read-only file, directory or file system at start, a full disk under load.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// faultDir is a new directory that any user may enter (the read-only tests
// run fenceq as an unprivileged user when the test runs as root, and root
// ignores file permissions).
func faultDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fenceq-fault-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { _ = os.Chmod(p, 0o755); return nil })
		os.RemoveAll(dir)
	})
	return dir
}

// faultMount mounts a tmpfs of the given size on a new directory and
// unmounts it at cleanup, or skips the test when it cannot (mounting needs
// root; CI runs as root).
func faultMount(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(faultDir(t), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Skipf("cannot mount a %s tmpfs on %s (%v): this test needs root", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// faultFile makes a fenceq file with one job at path and returns its bytes.
func faultFile(t *testing.T, path string) []byte {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatalf("bolt.Open(%s) error = %v", path, err)
	}
	if _, err := s.EnqueueJob(context.Background(), db.EnqueueRequest{Principal: "local"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runUnprivileged runs "fenceq serve --db path" as user nobody when the
// test runs as root (so that file permissions apply), else as the test's
// user, and returns its exit code and stderr.
func runUnprivileged(t *testing.T, dir, path string) (int, string) {
	t.Helper()
	bin := fenceqBin
	var attr *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		// fenceqBin sits in a directory only root may enter.
		bin = filepath.Join(dir, "fenceq-bin")
		raw, err := os.ReadFile(fenceqBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, raw, 0o755); err != nil {
			t.Fatal(err)
		}
		attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	cmd := exec.Command(bin, "serve", "--db", path, "--listen", "127.0.0.1:0")
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = attr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		return 0, stderr.String()
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("fenceq on %s kept running (stderr %q); want it to refuse the file", path, stderr.String())
	}
	return -1, ""
}

func TestFault_AReadOnlyDatabaseIsAClearErrorAtStart(t *testing.T) {
	t.Run("read-only file", func(t *testing.T) {
		dir := faultDir(t)
		path := filepath.Join(dir, "q.db")
		orig := faultFile(t, path)
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		code, stderr := runUnprivileged(t, dir, path)
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "permission denied") || strings.Contains(stderr, "fenceq serving") {
			t.Fatalf("fenceq on a read-only file: exit %d, stderr %q; want exit 1 and a message naming %s and \"permission denied\"", code, stderr, path)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
			t.Fatalf("the read-only file was changed")
		}
		t.Logf("read-only file: exit %d, %s", code, strings.TrimSpace(stderr))
	})
	t.Run("read-only directory and no file yet", func(t *testing.T) {
		dir := faultDir(t)
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(ro, "q.db")
		code, stderr := runUnprivileged(t, dir, path)
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "permission denied") {
			t.Fatalf("fenceq in a read-only directory: exit %d, stderr %q; want exit 1 and a message naming %s and \"permission denied\"", code, stderr, path)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("%s was created (%v)", path, err)
		}
	})
	t.Run("read-only file system", func(t *testing.T) {
		dir := faultMount(t, "4m")
		path := filepath.Join(dir, "q.db")
		orig := faultFile(t, path)
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			t.Skipf("cannot remount %s read-only: %v", dir, err)
		}
		code, _, stderr := runFenceq(t, nil, "serve", "--db", path, "--listen", "127.0.0.1:0")
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "read-only file system") {
			t.Fatalf("fenceq on a read-only file system: exit %d, stderr %q; want exit 1 and a message naming %s and \"read-only file system\"", code, stderr, path)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
			t.Fatalf("the file on the read-only file system was changed")
		}
	})
}

func TestFault_AFullDiskFailsWritesClearlyAndLosesNothing(t *testing.T) {
	dir := faultMount(t, "8m")
	path := filepath.Join(dir, "q.db")
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()
	c := srv.client

	acked := map[uint64]string{}
	enqueue := func(payload string) (int, []byte) {
		t.Helper()
		status, raw, err := c.do("POST", "/v1/jobs", `{"queue":"full","payload":`+payload+`}`)
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		if status == http.StatusCreated {
			var j crashJob
			if err := json.Unmarshal(raw, &j); err != nil {
				t.Fatalf("enqueue answered %s: %v", raw, err)
			}
			acked[j.ID] = payload
		}
		return status, raw
	}
	for i := range 20 {
		if st, raw := enqueue(fmt.Sprintf(`{"n":%d}`, i)); st != http.StatusCreated {
			t.Fatalf("enqueue before the disk is full: %d %s", st, raw)
		}
	}

	// Something else fills the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	f.Close()

	// Writes that need new pages fail with a clear 5xx; small ones may
	// still fit in pages the file already has, and are acknowledged.
	big := `"` + strings.Repeat("x", 200<<10) + `"`
	var failed []byte
	refused := 0
	for i := 0; i < 50 && failed == nil; i++ {
		payload := big
		if i%2 == 1 {
			payload = fmt.Sprintf(`{"during":%d}`, i)
		}
		status, raw := enqueue(payload)
		switch {
		case status == http.StatusCreated:
		case status >= 500:
			refused++
			failed = raw
			if status != http.StatusServiceUnavailable || !strings.Contains(string(raw), "no space left on device") {
				t.Fatalf("enqueue on a full disk: status %d %s; want 503 naming \"no space left on device\"", status, raw)
			}
		default:
			t.Fatalf("enqueue on a full disk: status %d %s", status, raw)
		}
	}
	if failed == nil {
		t.Fatalf("50 enqueues of up to 200 KiB on a full %s all succeeded; the disk was not full", dir)
	}
	// Reads still work while the disk is full.
	if status, raw, err := c.do("GET", "/v1/queues", ""); err != nil || status != http.StatusOK {
		t.Fatalf("GET /v1/queues on a full disk: %d %s %v", status, raw, err)
	}

	// The fault clears: the same server takes writes again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if st, raw := enqueue(big); st != http.StatusCreated {
		t.Fatalf("enqueue after space was freed: %d %s", st, raw)
	}

	// Restart on the same file (the hard way): everything acknowledged is there.
	srv.kill()
	srv.start()
	for id, payload := range acked {
		status, raw, err := c.do("GET", fmt.Sprintf("/v1/jobs/%d", id), "")
		var j crashJob
		if err != nil || status != http.StatusOK || json.Unmarshal(raw, &j) != nil {
			t.Fatalf("acknowledged job %d after the restart: %d %.200s %v", id, status, raw, err)
		}
		if string(j.Payload) != payload {
			t.Fatalf("acknowledged job %d after the restart has payload %.100s, want %.100s", id, j.Payload, payload)
		}
	}
	srv.kill()
	checkAcks(t, path, &crashAcks{enqueued: acked, completed: map[uint64]crashCompletion{}}, "after the disk was full")
	t.Logf("full disk: %d enqueues acknowledged, the first refusal was %s; after freeing space and a SIGKILL and restart all %d are there, Check() and the audit chain pass",
		len(acked), bytes.TrimSpace(failed), len(acked))
}
