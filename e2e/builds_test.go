package e2e

// Builds of other versions for the compatibility tests (issue 29): a
// release from the repository's own history (its commit read from
// docs/releases.tsv, never from a tag, which a clone may lack), and today's
// source stamped with another version. Each is built once per test run and
// cached by commit and flags; a history that lacks the commit fails with a
// message saying how to get it (never a skip with CI=true).

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// releaseCommit is the commit of release version in docs/releases.tsv.
func releaseCommit(t testing.TB, version string) string {
	t.Helper()
	f, err := os.Open("../docs/releases.tsv")
	if err != nil {
		t.Fatalf("the release list: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) == 2 && fields[0] == version {
			return fields[1]
		}
	}
	t.Fatalf("docs/releases.tsv names no release %s", version)
	return ""
}

// previousRelease is the release before today's source: the last line of
// docs/releases.tsv.
func previousRelease(t testing.TB) (version, commit string) {
	t.Helper()
	raw, err := os.ReadFile("../docs/releases.tsv")
	if err != nil {
		t.Fatalf("the release list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if fields := strings.Split(line, "\t"); len(fields) == 2 && strings.HasPrefix(fields[0], "v") {
			version, commit = fields[0], fields[1]
		}
	}
	if version == "" {
		t.Fatal("docs/releases.tsv names no release")
	}
	return version, commit
}

var builds struct {
	sync.Mutex
	dir  string
	done map[string]*buildResult
}

type buildResult struct {
	once sync.Once
	path string
	err  string
}

// buildDir is the directory of this run's builds, removed at exit
// (cleanupBuilds).
func buildDir(t testing.TB) string {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "fenceq-e2e-builds-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir = d
		builds.done = map[string]*buildResult{}
	}
	return builds.dir
}

// cleanupBuilds removes the run's builds; TestMain calls it.
func cleanupBuilds() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
}

// buildOnce runs build (which writes the binary at path) once per key.
func buildOnce(t testing.TB, key string, build func(path string) string) string {
	t.Helper()
	dir := buildDir(t)
	builds.Lock()
	r := builds.done[key]
	if r == nil {
		r = &buildResult{}
		builds.done[key] = r
	}
	builds.Unlock()
	r.once.Do(func() {
		r.path = filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_", "=", "_").Replace(key))
		r.err = build(r.path)
	})
	if r.err != "" {
		t.Fatal(r.err)
	}
	return r.path
}

// buildRelease builds fenceq as it was at commit (from this clone's
// history: git archive into a temporary directory) and returns the binary.
func buildRelease(t testing.TB, version, commit string) string {
	t.Helper()
	return buildOnce(t, "fenceq-"+version+"-"+commit[:12], func(path string) string {
		src := path + ".src"
		defer os.RemoveAll(src)
		if msg := archiveRelease(version, commit, src); msg != "" {
			return msg
		}
		return goBuild(src, path, "-X github.com/fenceq/fenceq/internal/buildinfo.version="+version+
			" -X github.com/fenceq/fenceq/internal/buildinfo.commit="+commit)
	})
}

// archiveRelease writes release version's source (commit, from this
// clone's history) into dir; "" on success, else why not.
func archiveRelease(version, commit, dir string) string {
	check := exec.Command("git", "cat-file", "-e", commit+"^{commit}")
	check.Dir = ".." // the repository's root: git archive in e2e/ would archive e2e/ alone
	if out, err := check.CombinedOutput(); err != nil {
		return "release " + version + "'s commit " + commit + " (docs/releases.tsv) is not in this clone (" + strings.TrimSpace(string(out)) + "): the compatibility tests build it from the history; fetch it (git fetch --unshallow, or actions/checkout with fetch-depth: 0)"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err.Error()
	}
	archive := exec.Command("sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", commit, dir)
	archive.Dir = ".."
	if out, err := archive.CombinedOutput(); err != nil {
		return "git archive " + commit + ": " + err.Error() + "\n" + string(out)
	}
	return ""
}

// buildOldClient builds the program testdata/oldclient/main.go.txt
// against release version's api/client: a module of its own whose go.mod
// replaces github.com/fenceq/fenceq with that release's source.
func buildOldClient(t testing.TB, version, commit string) string {
	t.Helper()
	return buildOnce(t, "oldclient-"+version+"-"+commit[:12], func(path string) string {
		src := path + ".fenceq"
		if msg := archiveRelease(version, commit, src); msg != "" {
			return msg
		}
		mod := path + ".mod"
		program, err := os.ReadFile("testdata/oldclient/main.go.txt")
		if err != nil {
			return err.Error()
		}
		sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
		if err != nil {
			return err.Error()
		}
		gomod := "module fenceq.test/oldclient\n\ngo 1.26.0\n\nrequire github.com/fenceq/fenceq v0.0.0\n\nreplace github.com/fenceq/fenceq => " + src + "\n"
		if err := os.MkdirAll(mod, 0o755); err != nil {
			return err.Error()
		}
		for name, b := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": program} {
			if err := os.WriteFile(filepath.Join(mod, name), b, 0o644); err != nil {
				return err.Error()
			}
		}
		cmd := exec.Command("go", "build", "-buildvcs=false", "-mod=mod", "-o", path, ".")
		cmd.Dir = mod
		if b, err := cmd.CombinedOutput(); err != nil {
			return "building the old client in " + mod + ": " + err.Error() + "\n" + string(b)
		}
		return ""
	})
}

// buildToday builds today's source stamped as version (the linker's -X,
// as scripts/release.sh does) and returns the binary.
func buildToday(t testing.TB, version string) string {
	t.Helper()
	return buildOnce(t, "fenceq-today-as-"+version, func(path string) string {
		root, err := filepath.Abs("..")
		if err != nil {
			return err.Error()
		}
		return goBuild(root, path, "-X github.com/fenceq/fenceq/internal/buildinfo.version="+version)
	})
}

// goBuild builds the module in dir into out; "" on success.
func goBuild(dir, out, ldflags string) string {
	cmd := exec.Command("go", "build", "-buildvcs=false", "-ldflags", ldflags, "-o", out, ".")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "go build in " + dir + ": " + err.Error() + "\n" + string(b)
	}
	return ""
}
