package engine_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The import rules of docs/ARCHITECTURE.md ("Imports"), read from the
// go tool: a rule broken by any non-test package fails here.

const module = "github.com/fenceq/fenceq/"

// engines are the storage engines; drivers are the libraries only an
// engine may reach.
var (
	engines = []string{module + "db/bolt", module + "db/postgres"}
	drivers = []string{"go.etcd.io/bbolt", "github.com/jackc/pgx"}
	// pickers may import an engine: the picker, and the test helpers that
	// give tests a real store of one engine.
	pickers = []string{module + "internal/engine", module + "internal/apitest", module + "db/postgres/pgtest", module + "db/dbtest"}
)

type goPackage struct {
	path    string
	imports []string // direct, non-test
	deps    []string // every package it reaches, non-test
}

// goList lists the module's packages with their imports and dependencies.
func goList(t *testing.T) map[string]goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{join .Deps \",\"}}", "./...")
	cmd.Dir = "../.." // the module's root, from internal/engine
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list ./...: %v\n%s", err, stderr)
	}
	pkgs := map[string]goPackage{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("go list printed %q", line)
		}
		p := goPackage{path: parts[0], imports: splitList(parts[1]), deps: splitList(parts[2])}
		pkgs[p.path] = p
	}
	if len(pkgs) < 15 {
		t.Fatalf("go list found %d packages, want the module's 20 or so", len(pkgs))
	}
	return pkgs
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// within reports whether path is one of prefixes or below one.
func within(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return path == p || strings.HasPrefix(path, p+"/") })
}

func TestImportRules(t *testing.T) {
	pkgs := goList(t)

	t.Run("only the picker and test helpers import an engine", func(t *testing.T) {
		for _, p := range pkgs {
			if within(p.path, engines) || slices.Contains(pickers, p.path) {
				continue
			}
			for _, imp := range p.imports {
				if within(imp, engines) {
					t.Errorf("%s imports the engine %s: only internal/engine picks an engine (docs/ARCHITECTURE.md)", p.path, imp)
				}
			}
		}
	})

	// What each package must never reach, directly or not.
	never := map[string][]string{
		// The HTTP API and the status page work on any db.Store.
		module + "api": append(slices.Clone(engines), drivers...),
		// The Go client keeps its dependencies: the protobuf API's
		// generated code is a package of its own (api/fenceqv1).
		module + "api/client": append(append(slices.Clone(engines), drivers...), "connectrpc.com", "google.golang.org/protobuf", module+"api/fenceqv1"),
		// The generated protobuf code is messages and a client, nothing of fenceq's.
		module + "api/fenceqv1/fenceqv1connect": append(append(slices.Clone(engines), drivers...), module+"db", module+"api/client"),
		module + "web":                          append(slices.Clone(engines), drivers...),
		// The rules are pure: nothing above them, no engine, no driver.
		module + "lease": {module + "db", module + "api", module + "web", module + "internal/engine", module + "internal/cli", "go.etcd.io/bbolt", "github.com/jackc/pgx"},
		module + "db":    append([]string{module + "api", module + "web", module + "internal/engine", module + "internal/cli"}, append(slices.Clone(engines), drivers...)...),
		// An engine reaches the rules, never the API, the picker or the other engine.
		module + "db/bolt":     {module + "api", module + "web", module + "internal/engine", module + "internal/cli", module + "db/postgres", "github.com/jackc/pgx"},
		module + "db/postgres": {module + "api", module + "web", module + "internal/engine", module + "internal/cli", module + "db/bolt", "go.etcd.io/bbolt"},
	}
	for path, forbidden := range never {
		t.Run(strings.TrimPrefix(path, module)+" reaches no engine nor anything above it", func(t *testing.T) {
			p, ok := pkgs[path]
			if !ok {
				t.Fatalf("go list has no package %s", path)
			}
			for _, dep := range p.deps {
				if within(dep, forbidden) {
					t.Errorf("%s reaches %s (go list -deps %s)", path, dep, path)
				}
			}
		})
	}
}

// TestPackageMainIsAtMost500Lines: package main stays thin (flags, the
// choice of command, serve's wiring); logic lives in internal packages.
func TestPackageMainIsAtMost500Lines(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{range .GoFiles}}{{$.Dir}}/{{.}}\n{{end}}", ".")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list .: %v", err)
	}
	lines := 0
	for _, f := range strings.Fields(string(out)) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines == 0 || lines > 500 {
		t.Errorf("package main has %d non-test lines, want 1 to 500: move logic into internal packages", lines)
	}
	t.Logf("package main: %d non-test lines", lines)
}
