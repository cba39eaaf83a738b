package walkthrough

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const page = "# A page\n\n" +
	"```sh\necho 'not marked (expect 500)'\n```\n\n" +
	Marker + "\n```sh\nS=http://127.0.0.1:7420\ncurl -s -o /dev/null -w '%{http_code} (expect 200, fine)\\n' $S/ok\n```\n\n" +
	"text\n\n" +
	RefusalsMarker + "\n```sh\ncurl -s -o /dev/null -w '%{http_code} (expect 404)\\n' $S/missing\necho done\nfalse; echo \"exit $? (expect 1: false fails)\"\n```\n"

// shells are the shells every Run test runs in.
var shells = []Shell{Bash, Zsh}

func TestParse_FindsOnlyMarkedBlocksAndTheirPromises(t *testing.T) {
	blocks, err := Parse("page.md", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("Parse() found %d blocks, want 2: %+v", len(blocks), blocks)
	}
	if blocks[0].Refusals || !blocks[1].Refusals {
		t.Errorf("Refusals = %v, %v; want false, true", blocks[0].Refusals, blocks[1].Refusals)
	}
	if blocks[0].Line != 8 || !strings.HasPrefix(blocks[0].Text, "S=http") {
		t.Errorf("first block = line %d %q, want line 8 starting S=http", blocks[0].Line, blocks[0].Text)
	}
	var got []Promise
	for _, b := range blocks {
		got = append(got, b.Promises()...)
	}
	if len(got) != 3 || got[0].Status != 200 || got[0].Line != 10 || got[1].Status != 404 || got[1].Line != 17 ||
		!got[2].Exit || got[2].Status != 1 || got[1].Exit {
		t.Errorf("promises = %+v, want 200 at line 10, 404 at line 17 and exit 1", got)
	}
}

func TestParse_RefusesAMarkerWithoutABlock(t *testing.T) {
	for _, md := range []string{
		Marker + "\n\n```sh\necho x\n```\n",                        // a blank line between
		Marker + "\n```bash\necho x\n```\n",                        // another language
		Marker + "\n```sh\necho x\n",                               // never ends
		"<!-- test: walkthrough refusal -->\n```sh\necho x\n```\n", // a misspelt marker
	} {
		if _, err := Parse("bad.md", []byte(md)); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", md)
		}
	}
}

func TestRun_ChecksPromisedStatusesAgainstARealServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	blocks, err := Parse("page.md", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sh := range shells {
		if out, errs := Run(ctx, sh, t.TempDir(), srv.URL, nil, blocks); len(errs) > 0 {
			t.Fatalf("Run(%s) = %v; output:\n%s", sh, errs, out)
		}

		// The same page promising another code fails, naming the line.
		wrong, _ := Parse("page.md", []byte(strings.Replace(page, "(expect 404)", "(expect 409)", 1)))
		_, errs := Run(ctx, sh, t.TempDir(), srv.URL, nil, wrong)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "page.md:17") || !strings.Contains(errs[0].Error(), "status 404, want 409") {
			t.Fatalf("Run(%s) with a wrong promise = %v, want one error for page.md:17: status 404, want 409", sh, errs)
		}

		// An exit status promised wrongly fails too.
		wrong, _ = Parse("page.md", []byte(strings.Replace(page, "(expect 1:", "(expect 0:", 1)))
		_, errs = Run(ctx, sh, t.TempDir(), srv.URL, nil, wrong)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "exit status 1, want 0") {
			t.Fatalf("Run(%s) with a wrong exit promise = %v, want one error: exit status 1, want 0", sh, errs)
		}

		// A block that is broken as shell is reported even where no promise is.
		broken := []Block{{File: "b.md", Line: 1, Text: "fenceq-no-such-command x\n"}}
		if _, errs := Run(ctx, sh, t.TempDir(), srv.URL, nil, broken); len(errs) != 1 || !strings.Contains(errs[0].Error(), "command not found") {
			t.Fatalf("Run(%s) of a broken block = %v, want one 'command not found'", sh, errs)
		}
	}
}

// What issue 31 found in the README: a comment pasted into zsh, which
// without interactivecomments is no comment. Bash takes the block; zsh
// reads "#", "→" and "200" as arguments, and the apostrophe in the comment
// opens a quote that swallows the rest of the paste.
func TestRun_ZshReadsCommentsAsAPasteDoes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, text := range []string{
		"Q=emails-$RANDOM   # a queue of this paste's own\necho \"exit $? (expect 0)\"\n",
		"curl -s -o /dev/null -w '%{http_code} (expect 200)\\n' " + srv.URL + "   # → 200\n",
	} {
		blocks := []Block{{File: "readme.md", Line: 1, Text: text}}
		if out, errs := Run(ctx, Bash, t.TempDir(), srv.URL, nil, blocks); len(errs) > 0 {
			t.Errorf("Run(bash, %q) = %v; output:\n%s", text, errs, out)
		}
		if out, errs := Run(ctx, Zsh, t.TempDir(), srv.URL, nil, blocks); len(errs) == 0 {
			t.Errorf("Run(zsh, %q) found nothing wrong; output:\n%s", text, out)
		}
	}
}

// What a block leaves running in the background ends with the script.
func TestRun_EndsWhatABlockLeftRunning(t *testing.T) {
	dir := t.TempDir()
	blocks := []Block{{File: "bg.md", Line: 1, Text: "sleep 60 &\necho $! > sleep.pid\n"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, errs := Run(ctx, Bash, dir, "http://127.0.0.1:1", nil, blocks); len(errs) > 0 {
		t.Fatalf("Run() = %v; output:\n%s", errs, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "sleep.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil { // the killed sleep may linger as a zombie briefly
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the block's background sleep (pid %d) still runs after Run returned", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
