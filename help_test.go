package main

// Every command answers --help and "fenceq help COMMAND" the same way:
// the same help, in the same form, on stdout, exit status 0 (issue 31: some
// exited 2, some printed Go's "Usage of …", "help worker" printed the
// general help). The commands come from the command tables (mainCommands
// and cli.Names), so a new command is walked without being listed here.

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/internal/cli"
)

func runHelp(t *testing.T, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), cli.ExitCode(err)
}

func TestHelp_EveryCommandAnswersHelpTheSameWay(t *testing.T) {
	t.Setenv("FENCEQ_DB", "") // serve --help must not need a store
	names := slices.Concat(slices.Sorted(maps.Keys(mainCommands)), cli.Names())
	for _, must := range []string{"serve", "worker", "lease", "lease acquire", "token new", "job check", "queue", "audit verify"} {
		if !slices.Contains(names, must) {
			t.Errorf("the command tables have no %q: %v", must, names)
		}
	}
	for _, name := range names {
		words := strings.Fields(name)
		out, errOut, exit := runHelp(t, append(slices.Clone(words), "--help")...)
		if exit != 0 || errOut != "" {
			t.Errorf("fenceq %s --help: exit %d, stderr %q; want exit 0 and the help on stdout", name, exit, errOut)
		}
		if !strings.HasPrefix(out, "usage: fenceq "+name+" ") && !(name == "serve" && strings.HasPrefix(out, "usage: fenceq [serve] ")) {
			t.Errorf("fenceq %s --help printed %.120q; want it to start \"usage: fenceq %s …\"", name, out, name)
		}
		if len(words) == 1 && strings.Contains(out, "Usage of") {
			t.Errorf("fenceq %s --help printed Go's default usage: %.200q", name, out)
		}
		for _, other := range [][]string{
			append([]string{"help"}, words...),
			append(slices.Clone(words), "-h"),
		} {
			o, e, x := runHelp(t, other...)
			if o != out || e != "" || x != 0 {
				t.Errorf("fenceq %s: exit %d, stdout %.80q, stderr %q; want exactly what \"fenceq %s --help\" printed, exit 0", strings.Join(other, " "), x, o, e, name)
			}
		}
	}
	// The general help, and usage mistakes that stay mistakes.
	if out, _, exit := runHelp(t, "help"); exit != 0 || !strings.Contains(out, "fenceq job check") {
		t.Errorf("fenceq help: exit %d, %.80q; want the general help listing every command", exit, out)
	}
	for _, args := range [][]string{{"lease"}, {"lease", "steal"}, {"help", "nosuch"}, {"get", "--bogus", "1"}} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--help") && !strings.Contains(err.Error(), "fenceq help") {
			t.Errorf("fenceq %v = %v (exit %d); want exit 2 saying where the help is", args, err, cli.ExitCode(err))
		}
		if errOut.Len() > 0 || out.Len() > 0 {
			t.Errorf("fenceq %v printed %q and %q itself; want only the one error line main prints", args, out.String(), errOut.String())
		}
	}
}

// --server without a scheme says so, once, with no doubled prefix.
func TestCLI_ServerWithoutSchemeIsAClearUsageError(t *testing.T) {
	_, _, exit := runHelp(t, "get", "1", "--server", "127.0.0.1:7420")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"get", "1", "--server", "127.0.0.1:7420"}, &out, &errOut)
	if exit != 2 || err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:7420") || strings.Contains(err.Error(), "fenceq:") {
		t.Errorf("fenceq get 1 --server 127.0.0.1:7420 = %v (exit %d); want a usage error naming http://127.0.0.1:7420, without a \"fenceq:\" of its own", err, exit)
	}
	err = run(context.Background(), []string{"get", "1", "--server", "http://[::1"}, &out, &errOut)
	if err == nil || strings.Contains(err.Error(), "fenceq:") {
		t.Errorf("fenceq get 1 --server http://[::1 = %v; want an error without a doubled \"fenceq:\" prefix", err)
	}
}
