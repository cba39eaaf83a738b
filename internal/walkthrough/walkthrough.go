// Package walkthrough runs the shell blocks of the README and the docs
// pages that are marked runnable, the way a reader pastes them, and checks
// the HTTP status codes their comments promise. It is what keeps the docs
// from drifting away from the binary (e2e/walkthrough_test.go runs it
// against the real server).
//
// The conventions, which the docs follow:
//
//   - A runnable block is a ```sh fenced block whose opening fence comes on
//     the line right after the line "<!-- test: walkthrough -->". Other
//     blocks are not run. "<!-- test: walkthrough refusals -->" marks a
//     block that sends what the API document does not allow (a bad field, a
//     wrong method) to show the refusal: it runs against the server, but a
//     runner behind a validating proxy, which would answer such requests
//     itself, skips it (Block.Refusals).
//   - The blocks of one file run in order in one shell process (variables
//     set in one block are seen by the next, as in a terminal), without set
//     -e, in a directory that holds the binary as ./fenceq: bash, and zsh
//     as a paste into a terminal is read (an interactive zsh without
//     interactivecomments, Debian's and macOS's default), where "#" starts
//     no comment and a "'" in one opens a quote. So the blocks hold no
//     comments: what a reader should expect is printed by the command.
//   - A command whose line prints "(expect N" promises that the word
//     printed right before it is N: a curl with
//     -w ' %{http_code} (expect 404 not_found)\n' promises the HTTP status
//     404, a command followed by ; echo "exit $? (expect 1: refused)" the
//     exit status 1 (the command-line client: 0 done, 1 refused). Such a
//     command must fit on its line.
//   - The server is http://127.0.0.1:7420 (or localhost:7420); a runner
//     that serves elsewhere rewrites that address in the blocks and sets
//     FENCEQ_SERVER for the command-line client.
package walkthrough

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Marker is the line that marks the next fenced block as runnable;
// RefusalsMarker marks one that shows refusals the API document does not
// describe as requests.
const (
	Marker         = "<!-- test: walkthrough -->"
	RefusalsMarker = "<!-- test: walkthrough refusals -->"
)

// DefaultServer is the address the blocks are written for.
const DefaultServer = "http://127.0.0.1:7420"

// Block is one runnable shell block.
type Block struct {
	File string // as given to Parse
	Line int    // the opening fence's line, 1-based
	Text string // the lines between the fences, each ending in "\n"
	// Refusals: the block sends requests the API document does not allow,
	// to show how they are refused (RefusalsMarker).
	Refusals bool
}

// Promise is a status a command of a block promises.
type Promise struct {
	Line    int  // in the file, 1-based
	Exit    bool // Status is the command's exit status, not an HTTP status it prints
	Status  int
	Command string
}

// promiseRE finds a promise in a line of a block; expectRE the word a
// command printed before its promise.
var (
	promiseRE = regexp.MustCompile(`\(expect ([0-9]{1,3})\b`)
	expectRE  = regexp.MustCompile(`(\S+) \(expect ([0-9]{1,3})\b`)
)

// Parse returns the runnable blocks of a markdown file. A marker that is
// not followed by a ```sh fence, or a block that does not end, is an
// error: a marked block that silently stopped running would defeat the
// point.
func Parse(file string, md []byte) ([]Block, error) {
	lines := strings.Split(string(md), "\n")
	var blocks []Block
	for i := 0; i < len(lines); i++ {
		m := strings.TrimSpace(lines[i])
		if m != Marker && m != RefusalsMarker {
			if strings.HasPrefix(m, "<!--") && strings.Contains(m, "test: walkthrough") {
				return nil, fmt.Errorf("walkthrough: %s:%d: %q is neither %s nor %s", file, i+1, m, Marker, RefusalsMarker)
			}
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			return nil, fmt.Errorf("walkthrough: %s:%d: %s is not followed by a ```sh fence", file, i+1, m)
		}
		b := Block{File: file, Line: i + 2, Refusals: m == RefusalsMarker}
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.Text += lines[j] + "\n"
		}
		if j == len(lines) {
			return nil, fmt.Errorf("walkthrough: %s:%d: the block does not end", file, b.Line)
		}
		blocks = append(blocks, b)
		i = j
	}
	return blocks, nil
}

// Promises returns the status codes the block's commands promise.
func (b Block) Promises() []Promise {
	var ps []Promise
	for i, l := range strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n") {
		if m := promiseRE.FindStringSubmatch(l); m != nil {
			p := Promise{Line: b.Line + 1 + i, Exit: !strings.Contains(l, "%{http_code}"), Command: strings.TrimSpace(l)}
			p.Status, _ = strconv.Atoi(m[1])
			ps = append(ps, p)
		}
	}
	return ps
}

// Script is the blocks as one shell script, with every address rewritten
// to server and a marker printed around each command that promises a
// status, so that Check can find what it printed.
func Script(blocks []Block, server string) string {
	var sb strings.Builder
	for _, b := range blocks {
		fmt.Fprintf(&sb, ": 'block %s:%d'\n", b.File, b.Line) // no "#": zsh reads no comment in a paste
		for i, l := range strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n") {
			line := b.Line + 1 + i
			if server != DefaultServer {
				l = strings.ReplaceAll(l, DefaultServer, server)
				l = strings.ReplaceAll(l, "http://localhost:7420", server)
			}
			if promiseRE.MatchString(l) {
				fmt.Fprintf(&sb, "printf '\\n@@walkthrough begin %d\\n'\n%s\nprintf '\\n@@walkthrough end %d %%d\\n' $?\n", line, l, line)
				continue
			}
			sb.WriteString(l + "\n")
		}
	}
	return sb.String()
}

// Check compares what the script printed with the blocks' promises and
// returns one error per promise broken (a wrong status, or a command that
// printed nothing).
func Check(blocks []Block, output string) []error {
	got := map[int]string{}
	var cur []string
	inside := -1
	sc := bufio.NewScanner(strings.NewReader(output))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		l := sc.Text()
		var n int
		if _, err := fmt.Sscanf(l, "@@walkthrough begin %d", &n); err == nil {
			inside, cur = n, nil
			continue
		}
		var code int
		if _, err := fmt.Sscanf(l, "@@walkthrough end %d %d", &n, &code); err == nil && n == inside {
			got[n] = strings.Join(cur, "\n")
			inside = -1
			continue
		}
		if inside >= 0 {
			cur = append(cur, l)
		}
	}
	var errs []error
	for _, b := range blocks {
		for _, p := range b.Promises() {
			out, ran := got[p.Line]
			what := "status"
			if p.Exit {
				what = "exit status"
			}
			var m []string
			if all := expectRE.FindAllStringSubmatch(out, -1); len(all) > 0 {
				m = all[len(all)-1]
			}
			switch {
			case !ran:
				errs = append(errs, fmt.Errorf("%s:%d: %s: did not run", b.File, p.Line, p.Command))
			case m == nil:
				errs = append(errs, fmt.Errorf("%s:%d: %s: printed no \"N (expect %d\"; printed %q", b.File, p.Line, p.Command, p.Status, trim(out)))
			case m[1] != m[2] || m[2] != strconv.Itoa(p.Status):
				errs = append(errs, fmt.Errorf("%s:%d: %s: %s %s, want %d; printed %q", b.File, p.Line, p.Command, what, m[1], p.Status, trim(out)))
			}
		}
	}
	return errs
}

func trim(s string) string {
	if len(s) > 400 {
		return s[:200] + " … " + s[len(s)-200:]
	}
	return s
}

// shellTrouble is what bash or zsh prints when a pasted block is broken as
// shell, whatever its commands answered.
var shellTrouble = regexp.MustCompile(`command not found|syntax error|unexpected EOF|bad substitution|unbound variable|` +
	`parse error|no matches found|unmatched|bad pattern|event not found|quote>`)

// Shell is a shell the blocks are pasted into.
type Shell string

// The shells: Bash runs the blocks as a script; Zsh reads them as an
// interactive zsh reads a paste (zsh -f -i, so without interactivecomments
// and with history expansion, from stdin; prompts empty).
const (
	Bash Shell = "bash"
	Zsh  Shell = "zsh"
)

// Run runs the blocks of one file with sh in dir (which should hold the
// binary as ./fenceq), against server, with env added to the process's
// environment. It returns what the script printed (stdout and stderr,
// interleaved) and every promise broken, plus any trouble the shell
// reported.
func Run(ctx context.Context, sh Shell, dir, server string, env []string, blocks []Block) (string, []error) {
	name := "walkthrough"
	if len(blocks) > 0 {
		name = strings.NewReplacer("/", "_", ".", "_").Replace(blocks[0].File)
	}
	name += "." + string(sh)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(Script(blocks, server)), 0o644); err != nil {
		return "", []error{err}
	}
	var cmd *exec.Cmd
	switch sh {
	case Bash:
		cmd = exec.CommandContext(ctx, "bash", "--noprofile", "--norc", path)
	case Zsh:
		cmd = exec.CommandContext(ctx, "zsh", "-f", "-i", "-o", "nopromptsp", "-o", "nopromptcr")
		in, err := os.Open(path)
		if err != nil {
			return "", []error{err}
		}
		defer in.Close()
		cmd.Stdin = in
		env = append([]string{"PS1=", "PS2=", "RPS1=", "RPS2="}, env...)
	default:
		return "", []error{fmt.Errorf("walkthrough: unknown shell %q", sh)}
	}
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "FENCEQ_SERVER="+server), env...)
	// Output goes to a file, not a pipe: a pipe held open by something a
	// block left in the background would keep Wait waiting.
	outFile, err := os.Create(path + ".out")
	if err != nil {
		return "", []error{err}
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	// The script runs in a process group of its own, so that whatever a
	// block started in the background (a worker) goes with it, also when
	// the context ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	raw, rerr := os.ReadFile(path + ".out")
	if rerr != nil {
		return "", []error{rerr}
	}
	out := bytes.NewBuffer(raw)
	errs := Check(blocks, out.String())
	if err != nil && ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("%s: %s did not finish: %v", name, sh, ctx.Err()))
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if shellTrouble.MatchString(l) {
			errs = append(errs, fmt.Errorf("%s: %s: %s", name, sh, strings.TrimSpace(l)))
		}
	}
	return out.String(), errs
}
