package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// "fenceq version" reports the Go toolchain and platform from the build
// info; a release build's -ldflags -X stamps show as its version and commit,
// in "version", "version --json" and "--version" alike.
func TestVersion(t *testing.T) {
	code, out, errOut := runFenceq(t, nil, "version", "--json")
	if code != 0 {
		t.Fatalf("fenceq version --json: exit %d, stderr %s", code, errOut)
	}
	var info struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		GoVersion string `json:"go_version"`
		Platform  string `json:"platform"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("fenceq version --json printed %q: %v", out, err)
	}
	if info.Version == "" || info.GoVersion != runtime.Version() || info.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("unstamped build: version --json = %+v, want a version, go %s on %s/%s", info, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}

	bin := filepath.Join(t.TempDir(), "fenceq-stamped")
	const pkg = "github.com/fenceq/fenceq/internal/buildinfo"
	const commit = "0123456789abcdef0123456789abcdef01234567"
	build := exec.Command("go", "build", "-trimpath", "-o", bin,
		"-ldflags", "-X "+pkg+".version=v9.8.7 -X "+pkg+".commit="+commit+" -X "+pkg+".commitTime=2026-12-01T00:00:00Z", "github.com/fenceq/fenceq")
	if raw, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with stamps: %v\n%s", err, raw)
	}
	want := "fenceq v9.8.7 (commit " + commit + ") " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	for _, args := range [][]string{{"version"}, {"--version"}} {
		raw, err := exec.Command(bin, args...).CombinedOutput()
		if got := strings.TrimSpace(string(raw)); err != nil || !strings.HasPrefix(got, want) {
			t.Errorf("stamped fenceq %v = %q, %v; want %q", args, got, err, want)
		}
	}
	raw, err := exec.Command(bin, "version", "--json").Output()
	if err != nil || json.Unmarshal(raw, &info) != nil || info.Version != "v9.8.7" || info.Commit != commit {
		t.Errorf("stamped fenceq version --json = %s, %v; want version v9.8.7, commit %s", raw, err, commit)
	}
}
