package cli

// The client commands: enqueue, get, list, cancel, retry, stats, lease,
// queue (queue.go), schedule (schedule.go), audit verify, backup and job check. Each is one call[T] (below): flags, then the
// client, then a bounded call, then the result printed for people or, with
// --json, the server's JSON for scripts. The server and token come from
// --server/--token or FENCEQ_SERVER/FENCEQ_TOKEN. Exit status: 0 done, 1
// the server refused or could not be reached, 2 a usage mistake.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/engine"
)

// callTimeout bounds one command's requests (longer than any server-side
// wait, which is at most a minute). Backups and workers are not bounded.
const callTimeout = 2 * time.Minute

// Env is what a command reads and writes besides its arguments.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Run runs the command named cmd ("enqueue", "lease", "worker", "token",
// …) with its arguments. An unknown command is a UsageError.
func Run(ctx context.Context, cmd string, args []string, e Env) error {
	if about, ok := groups[cmd]; ok {
		if len(args) == 0 {
			return UsageError{fmt.Sprintf("usage: fenceq %s ACTION …; see \"fenceq %s --help\"", cmd, cmd)}
		}
		if isHelp(args[0]) {
			fmt.Fprint(e.Stdout, groupHelp(cmd, about))
			return flag.ErrHelp
		}
		cmd, args = cmd+" "+args[0], args[1:]
	}
	if c, ok := commands[cmd]; ok {
		return c.run(ctx, e, args)
	}
	if group, action, ok := strings.Cut(cmd, " "); ok {
		return UsageError{fmt.Sprintf("unknown %s action %q; see \"fenceq %s --help\"", group, action, group)}
	}
	return UsageError{fmt.Sprintf("unknown command %q; run \"fenceq help\"", cmd)}
}

func isHelp(arg string) bool { return arg == "--help" || arg == "-help" || arg == "-h" }

// groups are the commands whose first argument is an action ("lease
// acquire"), with what the group is for; their actions are in commands.
var groups = map[string]string{
	"lease":    "Named leases: an exclusive hold on any resource, with a fencing token (docs/leases.md).",
	"queue":    "Pause, resume and list queues.",
	"schedule": "Periodic jobs: one job per tick of a cron expression or an interval, across replicas (docs/schedules.md).",
	"audit":    "The audit chain: verify it, or archive its old records.",
	"token":    "Bearer tokens for --auth-file.",
	"job":      "What a running job's own command can ask (fenceq worker --exec sets its environment).",
}

// groupHelp is "fenceq GROUP --help": the group's actions and their synopses.
func groupHelp(group, about string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "usage: fenceq %s ACTION [arguments] [flags]\n\n%s\n\nactions:\n", group, about)
	for _, name := range Names() {
		if g, _, ok := strings.Cut(name, " "); ok && g == group {
			fmt.Fprintf(&sb, "  %s\n", commands[name].usageLine())
		}
	}
	fmt.Fprintf(&sb, "\nRun \"fenceq %s ACTION --help\" for an action's flags.\n", group)
	return sb.String()
}

// Names returns every command Run knows, sorted: the groups ("lease") and
// each of their actions ("lease acquire"), and the commands alone ("get").
func Names() []string {
	names := make([]string, 0, len(commands)+len(groups))
	for n := range commands {
		names = append(names, n)
	}
	for g := range groups {
		names = append(names, g)
	}
	slices.Sort(names)
	return names
}

// command is one of fenceq's commands, run with its arguments.
type command interface {
	run(ctx context.Context, e Env, args []string) error
	// usageLine is the command's synopsis ("fenceq get ID [--json]").
	usageLine() string
}

// funcCommand is a command that is not a call (the worker, token new).
type funcCommand struct {
	synopsis string
	f        func(ctx context.Context, e Env, args []string) error
}

func (f funcCommand) run(ctx context.Context, e Env, args []string) error { return f.f(ctx, e, args) }
func (f funcCommand) usageLine() string                                   { return f.synopsis }

func (k call[T]) usageLine() string { return k.synopsis }

// commands is every command Run knows, by name ("lease acquire").
var commands = map[string]command{
	"enqueue":       enqueueCmd,
	"get":           getCmd,
	"list":          listCmd,
	"cancel":        jobActionCmd("cancel"),
	"retry":         jobActionCmd("retry"),
	"stats":         statsCmd,
	"lease acquire": leaseChangeCmd("acquire"),
	"lease renew":   leaseChangeCmd("renew"),
	"lease release": leaseChangeCmd("release"),
	"lease check":   leaseCheckCmd,
	"lease show":    leaseShowCmd,
	"queue pause":   queuePauseCmd("pause"),
	"queue resume":  queuePauseCmd("resume"),
	"queue list":    queueListCmd,
	// Periodic jobs (schedule.go).
	"schedule put":     schedulePutCmd,
	"schedule list":    scheduleListCmd,
	"schedule get":     scheduleGetCmd,
	"schedule delete":  scheduleActionCmd("delete"),
	"schedule pause":   scheduleActionCmd("pause"),
	"schedule resume":  scheduleActionCmd("resume"),
	"schedule trigger": scheduleTriggerCmd,
	"audit verify":     auditVerifyCmd,
	"audit archive":    auditArchiveCmd,
	"backup":           backupCmd,
	"job check":        jobCheckCmd,
	"worker": funcCommand{workerSynopsis, func(ctx context.Context, e Env, args []string) error {
		return workerCommand(ctx, args, e.Stdout, e.Stderr)
	}},
	"token new": funcCommand{tokenSynopsis, func(_ context.Context, e Env, args []string) error {
		return tokenCommand(args, e.Stdout, e.Stderr)
	}},
}

// callFunc is a client command's call, bound to its arguments.
type callFunc[T any] func(context.Context, *client.Client) (T, error)

// binder adds a command's own flags to fs and returns what, once they are
// parsed, turns them and the positional arguments into the call (or a
// UsageError).
type binder[T any] func(fs *flag.FlagSet, e Env) func(pos []string) (callFunc[T], error)

// call is the shape every client command shares: its flags and the client
// flags are parsed, its positional arguments checked, the client made, the
// call run under callTimeout, and its result printed.
type call[T any] struct {
	name      string // after "fenceq ": "get", "lease acquire"
	synopsis  string
	about     string
	jsonHelp  string // what --json prints
	args      [2]int // how many positional arguments: at least, at most
	unbounded bool   // no callTimeout: the call streams a file
	bind      binder[T]
	// show prints the result for people.
	show func(e Env, v T) error
	// jsonOf is what --json prints of the result (nil: the result itself).
	jsonOf func(v T) any
	// quiet, when set, is what -q (described by quietHelp) prints of the
	// result, alone on a line, for scripts that want one value.
	quiet     func(v T) any
	quietHelp string
	// verdict, when set, turns a result that was printed into an exit
	// status 1 (a broken audit chain).
	verdict func(v T) error
}

func (k call[T]) run(ctx context.Context, e Env, args []string) error {
	fs := NewFlagSet("fenceq "+k.name, e.Stderr)
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, k.jsonHelp)
	var quiet *bool
	if k.quiet != nil {
		quiet = fs.Bool("q", false, k.quietHelp)
	}
	prepare := k.bind(fs, e)
	SetUsage(fs, e.Stdout, k.synopsis, k.about)
	pos, err := parseCommand(fs, args, k.args[0], k.args[1])
	if err != nil {
		return err
	}
	do, err := prepare(pos)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if !k.unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	v, err := do(ctx, c)
	if err != nil {
		return cliError(c, err)
	}
	switch {
	case *asJSON && k.jsonOf != nil:
		err = printJSON(e.Stdout, k.jsonOf(v))
	case *asJSON:
		err = printJSON(e.Stdout, v)
	case quiet != nil && *quiet:
		_, err = fmt.Fprintln(e.Stdout, k.quiet(v))
	default:
		err = k.show(e, v)
	}
	if err == nil && k.verdict != nil {
		err = k.verdict(v)
	}
	return err
}

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	server string
	token  string
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	cf := &clientFlags{}
	fs.StringVar(&cf.server, "server", client.DefaultBaseURL, "base URL of the fenceq server")
	fs.StringVar(&cf.token, "token", "", "bearer token (needed when the server has an --auth-file)")
	return cf
}

func (cf *clientFlags) client() (*client.Client, error) {
	if !strings.Contains(cf.server, "://") {
		// "127.0.0.1:7420" would parse as a URL with scheme "127.0.0.1";
		// no scheme is guessed, as a token must not go out over plain
		// HTTP by accident.
		return nil, UsageError{fmt.Sprintf("--server %q has no scheme: give http://%s (or https://…)", cf.server, cf.server)}
	}
	c, err := client.New(cf.server, client.WithToken(cf.token), client.WithUserAgent("fenceq-cli"))
	if err != nil {
		// The client's error names itself ("fenceq: base URL …"); main
		// prefixes "fenceq: " once.
		return nil, UsageError{fmt.Sprintf("--server: %s", strings.TrimPrefix(err.Error(), "fenceq: "))}
	}
	return c, nil
}

// cliError says what went wrong with a call in a line for a person.
func cliError(c *client.Client, err error) error {
	var apiErr *client.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &apiErr):
		return fmt.Errorf("%s (%s, HTTP %d)", apiErr.Message, apiErr.Code, apiErr.StatusCode)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s within %v", c.BaseURL(), callTimeout)
	case errors.Is(err, context.Canceled):
		return errors.New("interrupted")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("cannot reach the server at %s: %v (is it running? see --server and FENCEQ_SERVER)", c.BaseURL(), ue.Err)
	}
	return err
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parsePositive reads a job id or fencing token argument.
func parsePositive(what, s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, UsageError{fmt.Sprintf("%s %q is not a positive integer", what, s)}
	}
	return n, nil
}

// when formats a time for people: local RFC 3339 and how far from now.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Until(t).Round(time.Second)
	switch {
	case d > 0:
		return fmt.Sprintf("%s (in %v)", t.Local().Format(time.RFC3339), d)
	case d < 0:
		return fmt.Sprintf("%s (%v ago)", t.Local().Format(time.RFC3339), -d)
	}
	return t.Local().Format(time.RFC3339) + " (now)"
}

// noFlags is bind for a command without flags of its own whose call needs
// only the positional arguments.
func noFlags[T any](do func(ctx context.Context, c *client.Client, pos []string) (T, error)) binder[T] {
	return func(*flag.FlagSet, Env) func([]string) (callFunc[T], error) {
		return func(pos []string) (callFunc[T], error) {
			return func(ctx context.Context, c *client.Client) (T, error) { return do(ctx, c, pos) }, nil
		}
	}
}

// byID is bind for a command whose one argument is a job id.
func byID[T any](do func(ctx context.Context, c *client.Client, id uint64) (T, error)) binder[T] {
	return func(*flag.FlagSet, Env) func([]string) (callFunc[T], error) {
		return func(pos []string) (callFunc[T], error) {
			id, err := parsePositive("job id", pos[0])
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client) (T, error) { return do(ctx, c, id) }, nil
		}
	}
}

// jobCheckCmd is "fenceq job check": for the command "fenceq worker
// --exec" runs, the claim it runs under checked right before a side
// effect. It prints nothing when the claim is current: under the worker,
// stdout is the job's result.
var jobCheckCmd = call[client.JobCheck]{
	name: "job check", synopsis: "fenceq job check [ID TOKEN]", jsonHelp: "print the check as JSON (on stdout: not inside a job's command)",
	args: [2]int{0, 2},
	about: "Exit 0 while the claim is current: the job is claimed, and the claim is the one with this fencing\n" +
		"token (nobody claimed it again after a pause past the lease, it was not cancelled or finished).\n" +
		"Exit 1 when it is not: stop without the side effect. Without arguments it checks the claim of\n" +
		"the command \"fenceq worker --exec\" runs: FENCEQ_JOB_ID, FENCEQ_FENCING_TOKEN and FENCEQ_WORKER,\n" +
		"against FENCEQ_SERVER with FENCEQ_TOKEN. Prints nothing when current. It narrows the window in\n" +
		"which a stale command acts, it does not close it: a service that checks the token itself\n" +
		"(POST /v1/jobs/{id}/check) is fenced, a command that only asked first is not (docs/leases.md).",
	bind: func(fs *flag.FlagSet, e Env) func([]string) (callFunc[client.JobCheck], error) {
		return func(pos []string) (callFunc[client.JobCheck], error) {
			rawID, rawToken, worker := os.Getenv("FENCEQ_JOB_ID"), os.Getenv("FENCEQ_FENCING_TOKEN"), os.Getenv("FENCEQ_WORKER")
			switch len(pos) {
			case 2:
				rawID, rawToken, worker = pos[0], pos[1], ""
			case 1:
				return nil, UsageError{"fenceq job check takes both ID and TOKEN, or neither (then FENCEQ_JOB_ID and FENCEQ_FENCING_TOKEN)"}
			}
			if rawID == "" || rawToken == "" {
				return nil, UsageError{"fenceq job check needs FENCEQ_JOB_ID and FENCEQ_FENCING_TOKEN (fenceq worker --exec sets them), or ID TOKEN"}
			}
			id, err := parsePositive("job id", rawID)
			if err != nil {
				return nil, err
			}
			token, err := parsePositive("fencing token", rawToken)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client) (client.JobCheck, error) {
				v, err := c.CheckJob(ctx, id, token)
				if client.IsCode(err, client.CodeFailedPrecondition) || client.IsCode(err, client.CodeNotFound) {
					who := ""
					if worker != "" {
						who = " of worker " + worker
					}
					var apiErr *client.Error
					errors.As(err, &apiErr)
					return v, fmt.Errorf("the claim%s on job %d with token %d is not current: %s", who, id, token, apiErr.Message)
				}
				return v, err
			}, nil
		}
	},
	show: func(Env, client.JobCheck) error { return nil },
}

var enqueueCmd = call[client.EnqueueResult]{
	name: "enqueue", synopsis: "fenceq enqueue [--queue Q] [--kind K] [--payload JSON|-] [flags]",
	about: "Enqueue a job and print its id.", jsonHelp: "print the job as JSON",
	bind: func(fs *flag.FlagSet, e Env) func([]string) (callFunc[client.EnqueueResult], error) {
		queue := fs.String("queue", "default", "queue to put the job on")
		kind := fs.String("kind", "", "free label for the worker")
		payload := fs.String("payload", "", "the job's payload: a JSON value, or - to read it from stdin (default null)")
		priority := fs.Int64("priority", 0, "higher is claimed first")
		maxAttempts := fs.Uint64("max-attempts", 0, "claims allowed before the job goes dead (0: the server's default, 10)")
		delay := fs.Duration("delay", 0, "earliest claim this long from now")
		runAt := fs.String("run-at", "", "earliest claim time, RFC 3339 (instead of --delay)")
		idem := fs.String("idempotency-key", "", "a repeat enqueue with the same key (and queue) returns the existing job")
		return func([]string) (callFunc[client.EnqueueResult], error) {
			job := client.NewJob{Queue: *queue, Kind: *kind, Priority: *priority, MaxAttempts: *maxAttempts,
				Delay: *delay, IdempotencyKey: *idem}
			raw := []byte(*payload)
			if *payload == "-" {
				var err error
				if raw, err = io.ReadAll(e.Stdin); err != nil {
					return nil, fmt.Errorf("reading the payload from stdin: %w", err)
				}
			}
			if len(strings.TrimSpace(string(raw))) > 0 {
				if !json.Valid(raw) {
					return nil, UsageError{fmt.Sprintf("--payload is not valid JSON: %.80q (a string needs quotes: '\"text\"')", raw)}
				}
				job.Payload = json.RawMessage(raw)
			}
			if *runAt != "" {
				t, err := time.Parse(time.RFC3339Nano, *runAt)
				if err != nil {
					return nil, UsageError{fmt.Sprintf("--run-at %q is not an RFC 3339 time (2031-01-02T15:04:05Z)", *runAt)}
				}
				job.RunAt = t
			}
			return func(ctx context.Context, c *client.Client) (client.EnqueueResult, error) { return c.Enqueue(ctx, job) }, nil
		}
	},
	jsonOf:    func(r client.EnqueueResult) any { return r.Job },
	quiet:     func(r client.EnqueueResult) any { return r.Job.ID },
	quietHelp: "print only the job id",
	show: func(e Env, r client.EnqueueResult) error {
		j := r.Job
		if r.Created {
			_, err := fmt.Fprintf(e.Stdout, "enqueued job %d on queue %s (%s)\n", j.ID, j.Queue, j.State)
			return err
		}
		_, err := fmt.Fprintf(e.Stdout, "job %d already exists with idempotency key %q on queue %s (%s)\n", j.ID, j.IdempotencyKey, j.Queue, j.State)
		return err
	},
}

var getCmd = call[client.Job]{
	name: "get", synopsis: "fenceq get ID [--json]", about: "Show one job.", jsonHelp: "print the job as JSON",
	args: [2]int{1, 1},
	bind: byID(func(ctx context.Context, c *client.Client, id uint64) (client.Job, error) { return c.GetJob(ctx, id) }),
	show: func(e Env, j client.Job) error { printJob(e.Stdout, j); return nil },
}

// printJob shows every field of a job that has a value.
func printJob(w io.Writer, j client.Job) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("id", strconv.FormatUint(j.ID, 10))
	row("queue", j.Queue)
	row("kind", j.Kind)
	row("state", j.State)
	row("priority", strconv.FormatInt(j.Priority, 10))
	row("attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts))
	if j.FencingToken != 0 {
		row("fencing token", strconv.FormatUint(j.FencingToken, 10))
	}
	row("claimed by", j.ClaimedBy)
	if !j.LeaseExpiresAt.IsZero() {
		row("lease expires", when(j.LeaseExpiresAt))
	}
	row("run at", when(j.RunAt))
	row("created", when(j.CreatedAt))
	row("updated", when(j.UpdatedAt))
	if !j.CompletedAt.IsZero() {
		row("completed", when(j.CompletedAt))
	}
	row("idempotency key", j.IdempotencyKey)
	if j.Schedule != "" {
		tick := j.ScheduledFor.UTC().Format(time.RFC3339Nano)
		if j.Backfilled {
			tick += " (backfilled: a missed tick caught up)"
		}
		row("schedule", j.Schedule)
		row("scheduled for", tick)
	}
	row("payload", string(j.Payload))
	row("result", string(j.Result))
	row("attestation", string(j.Attestation))
	row("last error", oneLine(j.LastError))
	for _, e := range j.Errors {
		row(fmt.Sprintf("error, attempt %d", e.Attempt), when(e.At)+": "+oneLine(e.Error))
	}
	tw.Flush()
}

// oneLine keeps a multi-line error on one table row.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ⏎ ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var listCmd = call[client.JobPage]{
	name: "list", synopsis: "fenceq list [--queue Q] [--state S] [--after ID] [--limit N] [--all] [--json]",
	about: "List jobs in id order.", jsonHelp: "print {\"jobs\":[…],\"next\":N} as JSON",
	bind: func(fs *flag.FlagSet, _ Env) func([]string) (callFunc[client.JobPage], error) {
		queue := fs.String("queue", "", "only this queue")
		state := fs.String("state", "", "only this state: "+strings.Join(client.States, ", "))
		after := fs.Uint64("after", 0, "start after this job id (the \"next\" of the previous page)")
		limit := fs.Int("limit", 0, "jobs per page (server default 100, at most 1000)")
		all := fs.Bool("all", false, "follow the pages to the end")
		return func([]string) (callFunc[client.JobPage], error) {
			if *state != "" && !slices.Contains(client.States, *state) {
				return nil, UsageError{fmt.Sprintf("--state %q is not one of %s", *state, strings.Join(client.States, ", "))}
			}
			return func(ctx context.Context, c *client.Client) (client.JobPage, error) {
				out := client.JobPage{Jobs: []client.Job{}}
				p := client.ListParams{Queue: *queue, State: *state, After: *after, Limit: *limit}
				for {
					page, err := c.ListJobs(ctx, p)
					if err != nil {
						return out, err
					}
					out.Jobs = append(out.Jobs, page.Jobs...)
					out.Next = page.Next
					if !*all || page.Next == 0 {
						return out, nil
					}
					p.After = page.Next
				}
			}, nil
		}
	},
	show: func(e Env, out client.JobPage) error {
		tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPTS\tPRIORITY\tRUN AT\tLAST ERROR")
		for _, j := range out.Jobs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%.60s\n", j.ID, j.Queue, orDash(j.Kind), j.State,
				j.Attempts, j.MaxAttempts, j.Priority, j.RunAt.Local().Format(time.RFC3339), oneLine(j.LastError))
		}
		tw.Flush()
		if out.Next != 0 {
			fmt.Fprintf(e.Stderr, "more jobs: add --after %d (or --all)\n", out.Next)
		}
		return nil
	},
}

// jobActionCmd is "fenceq cancel ID" or "fenceq retry ID".
func jobActionCmd(action string) call[client.Job] {
	k := call[client.Job]{
		name: action, synopsis: "fenceq " + action + " ID [--json]", jsonHelp: "print the job as JSON", args: [2]int{1, 1},
		about: "Cancel an available, scheduled, claimed or dead job (admin role).",
		bind: byID(func(ctx context.Context, c *client.Client, id uint64) (client.Job, error) {
			return c.CancelJob(ctx, id)
		}),
		show: func(e Env, j client.Job) error {
			_, err := fmt.Fprintf(e.Stdout, "job %d cancelled\n", j.ID)
			return err
		},
	}
	if action == "retry" {
		k.about = "Make a dead or cancelled job available again, with a fresh attempt budget (admin role)."
		k.bind = byID(func(ctx context.Context, c *client.Client, id uint64) (client.Job, error) { return c.RetryJob(ctx, id) })
		k.show = func(e Env, j client.Job) error {
			_, err := fmt.Fprintf(e.Stdout, "job %d is %s again (attempts %d of %d)\n", j.ID, j.State, j.Attempts, j.MaxAttempts)
			return err
		}
	}
	return k
}

// statsResult is what "fenceq stats --json" prints.
type statsResult struct {
	Queues []client.QueueCounts `json:"queues"`
	Server client.Stats         `json:"server"`
}

var statsCmd = call[statsResult]{
	name: "stats", synopsis: "fenceq stats [--json]", jsonHelp: "print {\"queues\":[…],\"server\":{…}} as JSON",
	about: "Show job counts per queue and state, commits and refused requests.",
	bind: noFlags(func(ctx context.Context, c *client.Client, _ []string) (statsResult, error) {
		queues, err := c.Queues(ctx)
		if err != nil {
			return statsResult{}, err
		}
		if queues == nil {
			queues = []client.QueueCounts{}
		}
		stats, err := c.Stats(ctx)
		return statsResult{queues, stats}, err
	}),
	show: func(e Env, r statsResult) error {
		tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "QUEUE\t")
		for _, s := range client.States {
			fmt.Fprintf(tw, "%s\t", strings.ToUpper(s))
		}
		fmt.Fprintln(tw)
		for _, q := range r.Queues {
			fmt.Fprintf(tw, "%s\t", q.Queue)
			for _, s := range client.States {
				fmt.Fprintf(tw, "%d\t", q.Counts[s])
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		if len(r.Queues) == 0 {
			fmt.Fprintln(e.Stdout, "(no jobs)")
		}
		fmt.Fprintf(e.Stdout, "\ncommits %d, mutations committed %d\n", r.Server.Commits, r.Server.CommittedOps)
		slices.SortFunc(r.Server.Refusals, func(a, b client.Refusal) int {
			return strings.Compare(a.Route+" "+a.Code, b.Route+" "+b.Code)
		})
		for _, x := range r.Server.Refusals {
			fmt.Fprintf(e.Stdout, "refused %s: %s ×%d\n", x.Route, x.Code, x.Count)
		}
		return nil
	},
}

// leaseChangeCmd is "fenceq lease acquire|renew|release NAME [TOKEN]".
func leaseChangeCmd(action string) call[client.Lease] {
	k := call[client.Lease]{name: "lease " + action, jsonHelp: "print the lease as JSON", args: [2]int{2, 2}}
	switch action {
	case "acquire":
		k.args = [2]int{1, 1}
		k.synopsis = "fenceq lease acquire NAME --holder H [--ttl D] [--wait D] [-q] [--json]"
		k.about = "Take the named lease and print its new fencing token. A held, unexpired lease is refused (exit 1)."
		k.quiet, k.quietHelp = func(l client.Lease) any { return l.FencingToken }, "print only the fencing token"
	case "renew":
		k.synopsis = "fenceq lease renew NAME TOKEN --holder H [--ttl D] [--json]"
		k.about = "Extend a lease you hold with its current token."
	case "release":
		k.synopsis = "fenceq lease release NAME TOKEN --holder H [--json]"
		k.about = "Give a lease back."
	}
	k.bind = func(fs *flag.FlagSet, _ Env) func([]string) (callFunc[client.Lease], error) {
		holder := fs.String("holder", "", "holder label (required); the holder is principal|label")
		var ttl, wait time.Duration
		if action != "release" {
			fs.DurationVar(&ttl, "ttl", 0, "how long the lease lasts (0: the server's default, 30s)")
		}
		if action == "acquire" {
			fs.DurationVar(&wait, "wait", 0, "when held, wait up to this long for it (at most 1m)")
		}
		return func(pos []string) (callFunc[client.Lease], error) {
			if *holder == "" {
				return nil, UsageError{fmt.Sprintf("fenceq lease %s needs --holder", action)}
			}
			name := pos[0]
			if action == "acquire" {
				return func(ctx context.Context, c *client.Client) (client.Lease, error) {
					return c.AcquireLease(ctx, name, client.AcquireLeaseParams{Holder: *holder, TTL: ttl, Wait: wait})
				}, nil
			}
			token, err := parsePositive("fencing token", pos[1])
			if err != nil {
				return nil, err
			}
			if action == "renew" {
				return func(ctx context.Context, c *client.Client) (client.Lease, error) {
					return c.RenewLease(ctx, name, client.RenewLeaseParams{Holder: *holder, FencingToken: token, TTL: ttl})
				}, nil
			}
			return func(ctx context.Context, c *client.Client) (client.Lease, error) {
				return c.ReleaseLease(ctx, name, *holder, token)
			}, nil
		}
	}
	k.show = func(e Env, l client.Lease) error {
		switch action {
		case "acquire":
			fmt.Fprintf(e.Stdout, "acquired %s: fencing token %d, held by %s until %s\n", l.Name, l.FencingToken, l.Holder, when(l.ExpiresAt))
		case "renew":
			fmt.Fprintf(e.Stdout, "renewed %s (token %d) until %s\n", l.Name, l.FencingToken, when(l.ExpiresAt))
		default:
			fmt.Fprintf(e.Stdout, "released %s (token %d)\n", l.Name, l.FencingToken)
		}
		return nil
	}
	return k
}

var leaseCheckCmd = call[client.LeaseCheck]{
	name: "lease check", synopsis: "fenceq lease check NAME TOKEN [--json]", jsonHelp: "print the check as JSON",
	about: "Exit 0 when TOKEN is the lease's current, unexpired token, 1 otherwise.",
	args:  [2]int{2, 2},
	bind: func(*flag.FlagSet, Env) func([]string) (callFunc[client.LeaseCheck], error) {
		return func(pos []string) (callFunc[client.LeaseCheck], error) {
			token, err := parsePositive("fencing token", pos[1])
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client) (client.LeaseCheck, error) {
				return c.CheckLease(ctx, pos[0], token)
			}, nil
		}
	},
	show: func(e Env, chk client.LeaseCheck) error {
		_, err := fmt.Fprintf(e.Stdout, "token %d is current for %s until %s\n", chk.FencingToken, chk.Name, when(chk.ExpiresAt))
		return err
	},
}

// leaseShowCmd's result is a client.Lease (with NAME) or a
// client.LeasePage (without).
var leaseShowCmd = call[any]{
	name: "lease show", synopsis: "fenceq lease show [NAME] [--prefix P] [--json]", jsonHelp: "print the lease, or the list, as JSON",
	about: "Show one lease, or list them.",
	args:  [2]int{0, 1},
	bind: func(fs *flag.FlagSet, _ Env) func([]string) (callFunc[any], error) {
		prefix := fs.String("prefix", "", "without NAME: only leases whose name starts with this")
		return func(pos []string) (callFunc[any], error) {
			if len(pos) == 1 {
				return func(ctx context.Context, c *client.Client) (any, error) { return c.GetLease(ctx, pos[0]) }, nil
			}
			return func(ctx context.Context, c *client.Client) (any, error) {
				out := client.LeasePage{Leases: []client.Lease{}}
				p := client.ListLeasesParams{Prefix: *prefix}
				for {
					page, err := c.ListLeases(ctx, p)
					if err != nil {
						return nil, err
					}
					out.Leases = append(out.Leases, page.Leases...)
					if page.Next == "" {
						return out, nil
					}
					p.After = page.Next
				}
			}, nil
		}
	},
	show: func(e Env, v any) error {
		tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
		switch v := v.(type) {
		case client.Lease:
			fmt.Fprintf(tw, "name\t%s\n", v.Name)
			fmt.Fprintf(tw, "held\t%v\n", v.Held)
			fmt.Fprintf(tw, "fencing token\t%d\n", v.FencingToken)
			fmt.Fprintf(tw, "holder\t%s\n", orDash(v.Holder))
			fmt.Fprintf(tw, "expires\t%s\n", when(v.ExpiresAt))
			fmt.Fprintf(tw, "acquired\t%s\n", when(v.AcquiredAt))
			fmt.Fprintf(tw, "updated\t%s\n", when(v.UpdatedAt))
		case client.LeasePage:
			fmt.Fprintln(tw, "NAME\tTOKEN\tHELD\tHOLDER\tEXPIRES")
			for _, l := range v.Leases {
				exp := "-"
				if !l.ExpiresAt.IsZero() {
					exp = l.ExpiresAt.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%d\t%v\t%s\t%s\n", l.Name, l.FencingToken, l.Held, orDash(l.Holder), exp)
			}
		}
		return tw.Flush()
	},
}

// auditVerifyCmd walks the chain offline on a file (--db, or neither
// flag) or, when --server (or FENCEQ_SERVER) is given and --db is not, asks
// the running server to (GET /v1/audit/verify).
var auditVerifyCmd = call[auditResult]{
	name: "audit verify", synopsis: "fenceq audit verify [--db FILE | --server URL] [--json]", jsonHelp: "print the report as JSON",
	about: "Walk the audit chain and report the first record that does not verify (exit 1 when the chain is broken).\n" +
		"With --db (or neither flag) the file is read offline: a database, or an archive file written by\n" +
		"\"fenceq audit archive\"; with --server (or FENCEQ_SERVER) and no --db, the running server walks it (admin role).",
	bind: func(fs *flag.FlagSet, e Env) func([]string) (callFunc[auditResult], error) {
		path := fs.String("db", "./fenceq.db", "verify this bbolt file, or an archive of \"fenceq audit archive\", offline (read-only; a copy while a server holds it)")
		return func([]string) (callFunc[auditResult], error) {
			dbGiven, serverGiven := false, false
			fs.Visit(func(f *flag.Flag) {
				dbGiven = dbGiven || f.Name == "db"
				serverGiven = serverGiven || f.Name == "server"
			})
			return func(ctx context.Context, c *client.Client) (auditResult, error) {
				if (dbGiven || !serverGiven) && isArchiveFile(*path) { // archive.go
					rep, err := verifyArchiveFile(*path)
					return auditResult{AuditReport: client.AuditReport{OK: rep.OK, Records: rep.Records, HeadSeq: rep.HeadSeq,
						HeadHash: rep.HeadHash, StartSeq: rep.StartSeq, StartHash: rep.StartHash, VerifiedSeq: rep.VerifiedSeq,
						FirstBroken: rep.FirstBroken, Reason: rep.Reason}, of: *path, archive: &rep.Header}, err
				}
				if dbGiven || !serverGiven {
					rep, err := engine.VerifyAudit(ctx, *path, e.Stderr)
					return auditResult{AuditReport: client.AuditReport{OK: rep.OK, Records: rep.Records, HeadSeq: rep.HeadSeq,
						HeadHash: rep.HeadHash, StartSeq: rep.StartSeq, StartHash: rep.StartHash, VerifiedSeq: rep.VerifiedSeq,
						FirstBroken: rep.FirstBroken, Reason: rep.Reason}, of: *path}, err
				}
				rep, err := c.VerifyAudit(ctx)
				return auditResult{AuditReport: rep, of: "the server at " + c.BaseURL()}, err
			}, nil
		}
	},
	jsonOf: func(r auditResult) any { return r.AuditReport },
	show: func(e Env, r auditResult) error {
		switch {
		case r.OK && r.archive != nil:
			_, err := fmt.Fprintf(e.Stdout, "ok: archive of %d records, %d-%d (after %d), all older than %s, end %s\n",
				r.Records, r.StartSeq+1, r.HeadSeq, r.StartSeq, r.archive.Before.Format(time.RFC3339), r.HeadHash)
			return err
		case r.OK && r.StartSeq > 0:
			_, err := fmt.Fprintf(e.Stdout, "ok: %d records after the checkpoint %d (older records were archived), head %d %s\n",
				r.Records, r.StartSeq, r.HeadSeq, r.HeadHash)
			return err
		case r.OK:
			_, err := fmt.Fprintf(e.Stdout, "ok: %d records, head %d %s\n", r.Records, r.HeadSeq, r.HeadHash)
			return err
		}
		_, err := fmt.Fprintf(e.Stdout, "BROKEN at sequence %d: %s (head %d %s)\n", r.FirstBroken, r.Reason, r.HeadSeq, r.HeadHash)
		return err
	},
	verdict: func(r auditResult) error {
		if !r.OK {
			return fmt.Errorf("audit chain of %s is broken at sequence %d", r.of, r.FirstBroken)
		}
		return nil
	},
}

// auditResult is a chain verification and what was verified.
type auditResult struct {
	client.AuditReport
	of      string
	archive *db.ArchiveHeader // the header, when an archive file was verified
}

// backupResult is what "fenceq backup --json" prints.
type backupResult struct {
	File     string `json:"file"`
	Bytes    int64  `json:"bytes"`
	Verified bool   `json:"verified"`
	Records  uint64 `json:"audit_records"`
	toStdout bool
}

var backupCmd = call[backupResult]{
	name: "backup", synopsis: "fenceq backup --out FILE [--verify=false] [--json]",
	jsonHelp: "print {\"file\",\"bytes\",\"verified\",\"audit_records\"} as JSON",
	about: "Download a consistent snapshot of the server's database (admin role). It is written to FILE.partial\n" +
		"and renamed to FILE only when complete and verified. To restore, stop the server and use the file as --db.",
	unbounded: true,
	bind: func(fs *flag.FlagSet, e Env) func([]string) (callFunc[backupResult], error) {
		out := fs.String("out", "", "file to write the snapshot to (required; - for stdout)")
		verify := fs.Bool("verify", true, "open the written file and check it (bbolt consistency and the audit chain)")
		return func([]string) (callFunc[backupResult], error) {
			if *out == "" {
				return nil, UsageError{"fenceq backup needs --out FILE (or --out - for stdout)"}
			}
			if *out == "-" {
				if fs.Lookup("json").Value.String() == "true" {
					return nil, UsageError{"fenceq backup --out - writes the snapshot to stdout; --json needs --out FILE"}
				}
				return func(ctx context.Context, c *client.Client) (backupResult, error) {
					n, err := c.Backup(ctx, e.Stdout)
					return backupResult{File: "-", Bytes: n, toStdout: true}, err
				}, nil
			}
			return func(ctx context.Context, c *client.Client) (backupResult, error) {
				return backupToFile(ctx, c, *out, *verify)
			}, nil
		}
	},
	show: func(e Env, r backupResult) error {
		switch {
		case r.toStdout:
		case r.Verified:
			fmt.Fprintf(e.Stdout, "wrote %s: %d bytes, consistent, audit chain ok (%d records)\n", r.File, r.Bytes, r.Records)
		default:
			fmt.Fprintf(e.Stdout, "wrote %s: %d bytes\n", r.File, r.Bytes)
		}
		return nil
	},
}

// backupToFile downloads the snapshot to out.partial, checks it and only
// then renames it to out, so that out is never a torn or unchecked copy.
func backupToFile(ctx context.Context, c *client.Client, out string, verify bool) (backupResult, error) {
	tmp := out + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return backupResult{}, err
	}
	defer os.Remove(tmp) // a no-op after the rename
	n, err := c.Backup(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return backupResult{}, err
	}
	r := backupResult{File: out, Bytes: n, Verified: verify}
	if verify {
		if r.Records, err = engine.CheckFile(ctx, tmp); err != nil {
			return backupResult{}, fmt.Errorf("the downloaded snapshot does not verify (kept nothing): %w", err)
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		return backupResult{}, err
	}
	// The rename survives a power cut only once the directory is synced
	// (TestPowerLoss_ABackupSurvivesACutRightAfterItIsWritten).
	d, err := os.Open(filepath.Dir(out))
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return backupResult{}, fmt.Errorf("wrote %s, but syncing its directory failed, so a power cut may undo the rename: %w", out, err)
	}
	return r, nil
}
