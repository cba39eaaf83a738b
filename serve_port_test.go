package main

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
