// Package cli holds fenceq's command-line commands other than serve and
// bench: the client commands that talk to a running server (enqueue, get,
// list, cancel, retry, stats, lease, queue, audit, backup, job check),
// the shell worker (worker --exec) and token new. It also holds the flag conventions
// every command shares, serve and bench included: FENCEQ_<FLAG> variables
// under the command line, one help form (SetUsage: on stdout, exit status
// 0), and UsageError for exit status 2.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// UsageError is a mistake on the command line (exit status 2).
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// ExitCode is the process's exit status for what a command returned: 0 for
// nil and for --help, 2 for a UsageError, 1 for anything else.
func ExitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// NewFlagSet returns a flag set that reports its errors to stderr.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// ParseWithEnv applies FENCEQ_<FLAG> variables (--max-lease is
// FENCEQ_MAX_LEASE), then the command line, which wins. It returns
// flag.ErrHelp for --help, a UsageError for a bad value or a positional
// argument.
func ParseWithEnv(fs *flag.FlagSet, args []string) error {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "FENCEQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = UsageError{fmt.Sprintf("%s=%q: %v", name, v, err)}
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return UsageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// parseCommand fills fs from FENCEQ_<FLAG> variables, then from the
// command line, where flags and positional arguments may come in any order
// ("get 7 --json" and "get --json 7"); everything after "--" is
// positional. It returns the positional arguments, which must number
// between minArgs and maxArgs.
func parseCommand(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	if err := ParseWithEnv(fs, nil); err != nil {
		return nil, err
	}
	var pos []string
	for rest := args; len(rest) > 0; {
		if err := parse(fs, rest); err != nil {
			return nil, err
		}
		consumed := len(rest) - fs.NArg()
		if consumed > 0 && rest[consumed-1] == "--" {
			pos = append(pos, fs.Args()...)
			break
		}
		rest = fs.Args()
		if len(rest) > 0 {
			pos, rest = append(pos, rest[0]), rest[1:]
		}
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		want := fmt.Sprintf("%d", minArgs)
		if maxArgs > minArgs {
			want = fmt.Sprintf("%d to %d", minArgs, maxArgs)
		}
		return nil, UsageError{fmt.Sprintf("%s takes %s argument(s), got %d; see \"%s --help\"", fs.Name(), want, len(pos), fs.Name())}
	}
	return pos, nil
}

// SetUsage makes "fenceq CMD --help" (and -h, and "fenceq help CMD") print
// to stdout a synopsis, what the command does and its flags: every
// command's help has this form, and asking for it is exit status 0.
func SetUsage(fs *flag.FlagSet, stdout io.Writer, synopsis, about string) {
	fs.Usage = func() {
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n\nflags (also FENCEQ_<FLAG> variables):\n", synopsis, strings.TrimRight(about, "\n"))
		out := fs.Output()
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
}

// parse runs fs.Parse without the flag package's own printing: --help
// prints the help (fs.Usage) and returns flag.ErrHelp; any other mistake is
// one UsageError that says where the help is, which main prints once.
func parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	return UsageError{fmt.Sprintf("%v; see \"%s --help\"", err, fs.Name())}
}

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Sprintf(format, args...)}
}
