package e2e

// The docs cannot drift: the shell blocks of README.md and docs/*.md marked
// "<!-- test: walkthrough -->" run against the real binary, and every
// command that promises a status (it prints "409 (expect 409 …)", or
// "exit 1 (expect 1 …)" for the command-line client) must print it. The
// conventions are in internal/walkthrough.
//
// The server is started on 127.0.0.1:7420, the address the blocks are
// written for (another free port when 7420 is taken; the blocks are then
// rewritten to it). FENCEQ_WALKTHROUGH_SERVER=URL runs the blocks against
// a server that is already running instead, e.g. a validating proxy in
// front of one; the blocks marked "refusals" (requests the API document
// does not allow, sent to show the refusal) are skipped then. Every file's
// blocks run twice on the same server, as a reader may paste them again:
// first in bash, then in zsh as an interactive zsh reads a paste (no
// comments, history expansion on; the default shell on macOS). zsh must be
// installed (.ci/walkthrough.sh installs Debian's).

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/internal/walkthrough"
)

// repoRoot is the repository's top directory, seen from this package's.
const repoRoot = ".."

// docFiles are the markdown files whose marked blocks run, named from the
// repository's top directory (README.md, docs/api.md, ...).
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		files[i] = filepath.ToSlash(strings.TrimPrefix(f, repoRoot+string(filepath.Separator)))
	}
	return append([]string{"README.md"}, files...)
}

// readDoc reads a file named from the repository's top directory.
func readDoc(f string) ([]byte, error) {
	return os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f)))
}

func TestWalkthrough_TheDocsBlocksRunAgainstTheRealBinary(t *testing.T) {
	type page struct {
		file   string
		blocks []walkthrough.Block
	}
	var pages []page
	promised := map[string]map[int]bool{}
	for _, f := range docFiles(t) {
		md, err := readDoc(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := walkthrough.Parse(f, md)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) == 0 {
			continue
		}
		pages = append(pages, page{f, blocks})
		promised[f] = map[int]bool{}
		for _, b := range blocks {
			for _, p := range b.Promises() {
				promised[f][p.Status] = true
			}
		}
	}
	// The README's walk is the point of the README: the stale token's 404
	// and 409, and the current token's 200.
	for _, st := range []int{200, 404, 409} {
		if !promised["README.md"][st] {
			t.Errorf("README.md's walkthrough blocks promise no %d; the walk with the stale token must show it", st)
		}
	}

	base := os.Getenv("FENCEQ_WALKTHROUGH_SERVER")
	if base != "" {
		for i := range pages {
			pages[i].blocks = slices.DeleteFunc(pages[i].blocks, func(b walkthrough.Block) bool { return b.Refusals })
		}
	} else {
		listen := "127.0.0.1:7420"
		if ln, err := net.Listen("tcp", listen); err != nil {
			t.Logf("127.0.0.1:7420 is taken (%v); serving on another port and rewriting the blocks", err)
			listen = "127.0.0.1:0"
		} else {
			ln.Close()
		}
		_, base = startServing(t, nil, "--db", filepath.Join(t.TempDir(), "fenceq.db"), "--listen", listen)
	}
	dir := t.TempDir()
	bin, err := os.ReadFile(fenceqBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fenceq"), bin, 0o755); err != nil {
		t.Fatal(err)
	}

	for _, sh := range []walkthrough.Shell{walkthrough.Bash, walkthrough.Zsh} {
		if _, err := exec.LookPath(string(sh)); err != nil {
			t.Fatalf("the docs' blocks are pasted into %s, which is not installed (%v): .ci/walkthrough.sh installs it (apt-get install %s)", sh, err, sh)
		}
	}
	// docs/api.md's protobuf blocks run buf curl: buf is the npm package
	// .ci/proto.sh installs into .ci/proto (or one on the PATH).
	bufDir, err := filepath.Abs(filepath.Join(repoRoot, ".ci", "proto", "node_modules", ".bin"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bufDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	if _, err := os.Stat(filepath.Join(bufDir, "buf")); err != nil {
		if _, err := exec.LookPath("buf"); err != nil {
			t.Fatalf("docs/api.md's blocks run buf curl, and buf is neither in %s nor on the PATH: run .ci/proto.sh (npm ci of .ci/proto)", bufDir)
		}
	}
	for round, sh := range []walkthrough.Shell{walkthrough.Bash, walkthrough.Zsh} {
		for _, p := range pages {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			out, errs := walkthrough.Run(ctx, sh, dir, base, env, p.blocks)
			cancel()
			for _, err := range errs {
				t.Errorf("paste %d (%s): %v", round+1, sh, err)
			}
			if len(errs) > 0 {
				t.Logf("paste %d (%s) of %s printed:\n%s", round+1, sh, p.file, out)
			} else if testing.Verbose() {
				n := 0
				for _, b := range p.blocks {
					n += len(b.Promises())
				}
				t.Logf("paste %d (%s) of %s: %d blocks, %d promised statuses kept", round+1, sh, p.file, len(p.blocks), n)
			}
		}
	}
}

// linkRE finds markdown links: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestDocs_READMEIsShortAndEveryLinkResolves(t *testing.T) {
	readme, err := readDoc("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readme); n > 8000 {
		t.Errorf("README.md is %d bytes, want at most 8000: move detail to docs/", n)
	}
	for _, f := range docFiles(t) {
		md, err := readDoc(f)
		if err != nil {
			t.Fatal(err)
		}
		links := linkRE.FindAllSubmatch(md, -1)
		if f == "README.md" && len(links) < 6 {
			t.Errorf("README.md has %d links, want its table of links to the docs", len(links))
		}
		for _, m := range links {
			target := string(m[1])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(repoRoot, filepath.FromSlash(filepath.Dir(f)), filepath.FromSlash(target))
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which is not in the repository: %v", f, m[1], err)
			}
		}
	}
}

// TestDocs_EveryEndToEndTestIsNamedInTheDocs: every Test function of this
// package is named, in full, in a page under docs/ (docs/guarantees.md
// names them all), so that no end-to-end test hides from a reader.
func TestDocs_EveryEndToEndTestIsNamedInTheDocs(t *testing.T) {
	var docs []byte
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".md" {
			return err
		}
		b, err := os.ReadFile(path)
		docs = append(append(docs, b...), '\n')
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := e2eTestNames(t)
	if len(tests) < 30 {
		t.Fatalf("found %d Test functions in this package, want the 40 or so of e2e/: %v", len(tests), tests)
	}
	for _, name := range tests {
		if !regexp.MustCompile(`\b` + name + `\b`).Match(docs) {
			t.Errorf("%s (e2e/) is named in no page under docs/: add it to docs/guarantees.md", name)
		}
	}
}

// e2eTestNames are the names of this package's Test functions (TestMain
// aside), read from its source files.
func e2eTestNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			names = append(names, fn.Name.Name)
		}
	}
	return names
}
