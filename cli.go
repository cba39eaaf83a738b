package main

// The client commands: enqueue, get, list, cancel, retry, stats, lease,
// audit verify --server and backup. They talk to a running server through
// api/client; the server and token come from --server/--token or
// FENCEQ_SERVER/FENCEQ_TOKEN. Output is for people unless --json is given,
// which prints the server's JSON objects for scripts. Exit status: 0 done,
// 1 the server refused or could not be reached, 2 a usage mistake.

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
	"github.com/fenceq/fenceq/db/bolt"
)

// callTimeout bounds one command's requests (longer than any server-side
// wait, which is at most a minute). Backups and workers are not bounded.
const callTimeout = 2 * time.Minute

// clientFlags are the flags every client command has.
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
	c, err := client.New(cf.server, client.WithToken(cf.token), client.WithUserAgent("fenceq-cli"))
	if err != nil {
		return nil, usageError{fmt.Sprintf("--server: %v", err)}
	}
	return c, nil
}

// setUsage makes "fenceq CMD --help" print a synopsis, what the command
// does and its flags.
func setUsage(fs *flag.FlagSet, stderr io.Writer, synopsis, about string) {
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n\n%s\n\nflags (also FENCEQ_<FLAG> variables):\n", synopsis, about)
		fs.PrintDefaults()
	}
}

// parseCommand fills fs from FENCEQ_<FLAG> variables, then from the
// command line, where flags and positional arguments may come in any order
// ("get 7 --json" and "get --json 7"); everything after "--" is
// positional. It returns the positional arguments, which must number
// between minArgs and maxArgs.
func parseCommand(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	if err := parseWithEnv(fs, nil); err != nil {
		return nil, err
	}
	var pos []string
	for rest := args; len(rest) > 0; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
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
		return nil, usageError{fmt.Sprintf("%s takes %s argument(s), got %d; see \"%s --help\"", fs.Name(), want, len(pos), fs.Name())}
	}
	return pos, nil
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

// parseID reads a job id argument.
func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usageError{fmt.Sprintf("job id %q is not a positive integer", s)}
	}
	return id, nil
}

// parseToken reads a fencing token argument.
func parseToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, usageError{fmt.Sprintf("fencing token %q is not a positive integer", s)}
	}
	return t, nil
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

// enqueueCommand: fenceq enqueue [--queue Q] [--payload JSON|-] …
func enqueueCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq enqueue", stderr)
	cf := addClientFlags(fs)
	queue := fs.String("queue", "default", "queue to put the job on")
	kind := fs.String("kind", "", "free label for the worker")
	payload := fs.String("payload", "", "the job's payload: a JSON value, or - to read it from stdin (default null)")
	priority := fs.Int64("priority", 0, "higher is claimed first")
	maxAttempts := fs.Uint64("max-attempts", 0, "claims allowed before the job goes dead (0: the server's default, 10)")
	delay := fs.Duration("delay", 0, "earliest claim this long from now")
	runAt := fs.String("run-at", "", "earliest claim time, RFC 3339 (instead of --delay)")
	idem := fs.String("idempotency-key", "", "a repeat enqueue with the same key (and queue) returns the existing job")
	quiet := fs.Bool("q", false, "print only the job id")
	asJSON := fs.Bool("json", false, "print the job as JSON")
	setUsage(fs, stderr, "fenceq enqueue [--queue Q] [--kind K] [--payload JSON|-] [flags]",
		"Enqueue a job and print its id.")
	if _, err := parseCommand(fs, args, 0, 0); err != nil {
		return err
	}
	job := client.NewJob{Queue: *queue, Kind: *kind, Priority: *priority, MaxAttempts: *maxAttempts,
		Delay: *delay, IdempotencyKey: *idem}
	raw := []byte(*payload)
	if *payload == "-" {
		var err error
		if raw, err = io.ReadAll(stdin); err != nil {
			return fmt.Errorf("reading the payload from stdin: %w", err)
		}
	}
	if len(strings.TrimSpace(string(raw))) > 0 {
		if !json.Valid(raw) {
			return usageError{fmt.Sprintf("--payload is not valid JSON: %.80q (a string needs quotes: '\"text\"')", raw)}
		}
		job.Payload = json.RawMessage(raw)
	}
	if *runAt != "" {
		t, err := time.Parse(time.RFC3339Nano, *runAt)
		if err != nil {
			return usageError{fmt.Sprintf("--run-at %q is not an RFC 3339 time (2031-01-02T15:04:05Z)", *runAt)}
		}
		job.RunAt = t
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := c.Enqueue(ctx, job)
	if err != nil {
		return cliError(c, err)
	}
	j := res.Job
	switch {
	case *asJSON:
		return printJSON(stdout, j)
	case *quiet:
		fmt.Fprintln(stdout, j.ID)
	case res.Created:
		fmt.Fprintf(stdout, "enqueued job %d on queue %s (%s)\n", j.ID, j.Queue, j.State)
	default:
		fmt.Fprintf(stdout, "job %d already exists with idempotency key %q on queue %s (%s)\n", j.ID, j.IdempotencyKey, j.Queue, j.State)
	}
	return nil
}

// getCommand: fenceq get ID [--json]
func getCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq get", stderr)
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the job as JSON")
	setUsage(fs, stderr, "fenceq get ID [--json]", "Show one job.")
	pos, err := parseCommand(fs, args, 1, 1)
	if err != nil {
		return err
	}
	id, err := parseID(pos[0])
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	j, err := c.GetJob(ctx, id)
	if err != nil {
		return cliError(c, err)
	}
	if *asJSON {
		return printJSON(stdout, j)
	}
	printJob(stdout, j)
	return nil
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

// listCommand: fenceq list [--queue Q] [--state S] [--after ID] [--limit N] [--all]
func listCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq list", stderr)
	cf := addClientFlags(fs)
	queue := fs.String("queue", "", "only this queue")
	state := fs.String("state", "", "only this state: "+strings.Join(client.States, ", "))
	after := fs.Uint64("after", 0, "start after this job id (the \"next\" of the previous page)")
	limit := fs.Int("limit", 0, "jobs per page (server default 100, at most 1000)")
	all := fs.Bool("all", false, "follow the pages to the end")
	asJSON := fs.Bool("json", false, "print {\"jobs\":[…],\"next\":N} as JSON")
	setUsage(fs, stderr, "fenceq list [--queue Q] [--state S] [--after ID] [--limit N] [--all] [--json]",
		"List jobs in id order.")
	if _, err := parseCommand(fs, args, 0, 0); err != nil {
		return err
	}
	if *state != "" && !slices.Contains(client.States, *state) {
		return usageError{fmt.Sprintf("--state %q is not one of %s", *state, strings.Join(client.States, ", "))}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var out client.JobPage
	p := client.ListParams{Queue: *queue, State: *state, After: *after, Limit: *limit}
	for {
		page, err := c.ListJobs(ctx, p)
		if err != nil {
			return cliError(c, err)
		}
		out.Jobs = append(out.Jobs, page.Jobs...)
		out.Next = page.Next
		if !*all || page.Next == 0 {
			break
		}
		p.After = page.Next
	}
	if out.Jobs == nil {
		out.Jobs = []client.Job{}
	}
	if *asJSON {
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPTS\tPRIORITY\tRUN AT\tLAST ERROR")
	for _, j := range out.Jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%.60s\n", j.ID, j.Queue, orDash(j.Kind), j.State,
			j.Attempts, j.MaxAttempts, j.Priority, j.RunAt.Local().Format(time.RFC3339), oneLine(j.LastError))
	}
	tw.Flush()
	if out.Next != 0 {
		fmt.Fprintf(stderr, "more jobs: add --after %d (or --all)\n", out.Next)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jobActionCommand: fenceq cancel ID, fenceq retry ID.
func jobActionCommand(ctx context.Context, action string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq "+action, stderr)
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the job as JSON")
	about := "Cancel an available, scheduled, claimed or dead job (admin role)."
	if action == "retry" {
		about = "Make a dead or cancelled job available again, with a fresh attempt budget (admin role)."
	}
	setUsage(fs, stderr, "fenceq "+action+" ID [--json]", about)
	pos, err := parseCommand(fs, args, 1, 1)
	if err != nil {
		return err
	}
	id, err := parseID(pos[0])
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var j client.Job
	if action == "cancel" {
		j, err = c.CancelJob(ctx, id)
	} else {
		j, err = c.RetryJob(ctx, id)
	}
	if err != nil {
		return cliError(c, err)
	}
	if *asJSON {
		return printJSON(stdout, j)
	}
	if action == "cancel" {
		fmt.Fprintf(stdout, "job %d cancelled\n", j.ID)
	} else {
		fmt.Fprintf(stdout, "job %d is %s again (attempts %d of %d)\n", j.ID, j.State, j.Attempts, j.MaxAttempts)
	}
	return nil
}

// statsCommand: fenceq stats [--json]
func statsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq stats", stderr)
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print {\"queues\":[…],\"server\":{…}} as JSON")
	setUsage(fs, stderr, "fenceq stats [--json]", "Show job counts per queue and state, commits and refused requests.")
	if _, err := parseCommand(fs, args, 0, 0); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	queues, err := c.Queues(ctx)
	if err != nil {
		return cliError(c, err)
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		return cliError(c, err)
	}
	if *asJSON {
		if queues == nil {
			queues = []client.QueueCounts{}
		}
		return printJSON(stdout, struct {
			Queues []client.QueueCounts `json:"queues"`
			Server client.Stats         `json:"server"`
		}{queues, stats})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "QUEUE\t")
	for _, s := range client.States {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(s))
	}
	fmt.Fprintln(tw)
	for _, q := range queues {
		fmt.Fprintf(tw, "%s\t", q.Queue)
		for _, s := range client.States {
			fmt.Fprintf(tw, "%d\t", q.Counts[s])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if len(queues) == 0 {
		fmt.Fprintln(stdout, "(no jobs)")
	}
	fmt.Fprintf(stdout, "\ncommits %d, mutations committed %d\n", stats.Commits, stats.CommittedOps)
	slices.SortFunc(stats.Refusals, func(a, b client.Refusal) int {
		return strings.Compare(a.Route+" "+a.Code, b.Route+" "+b.Code)
	})
	for _, r := range stats.Refusals {
		fmt.Fprintf(stdout, "refused %s: %s ×%d\n", r.Route, r.Code, r.Count)
	}
	return nil
}

// leaseCommand: fenceq lease acquire|renew|release|check|show …
func leaseCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "usage: fenceq lease acquire|renew|release|check|show …; see \"fenceq lease ACTION --help\""
	if len(args) == 0 {
		return usageError{usage}
	}
	action, args := args[0], args[1:]
	fs := newFlagSet("fenceq lease "+action, stderr)
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the lease as JSON")
	var holder *string
	if action == "acquire" || action == "renew" || action == "release" {
		holder = fs.String("holder", "", "holder label (required); the holder is principal|label")
	}
	var ttl, wait *time.Duration
	if action == "acquire" || action == "renew" {
		ttl = fs.Duration("ttl", 0, "how long the lease lasts (0: the server's default, 30s)")
	}
	var quiet *bool
	var prefix *string
	switch action {
	case "acquire":
		wait = fs.Duration("wait", 0, "when held, wait up to this long for it (at most 1m)")
		quiet = fs.Bool("q", false, "print only the fencing token")
		setUsage(fs, stderr, "fenceq lease acquire NAME --holder H [--ttl D] [--wait D] [-q] [--json]",
			"Take the named lease and print its new fencing token. A held, unexpired lease is refused (exit 1).")
	case "renew":
		setUsage(fs, stderr, "fenceq lease renew NAME TOKEN --holder H [--ttl D] [--json]",
			"Extend a lease you hold with its current token.")
	case "release":
		setUsage(fs, stderr, "fenceq lease release NAME TOKEN --holder H [--json]", "Give a lease back.")
	case "check":
		setUsage(fs, stderr, "fenceq lease check NAME TOKEN [--json]",
			"Exit 0 when TOKEN is the lease's current, unexpired token, 1 otherwise.")
	case "show":
		prefix = fs.String("prefix", "", "without NAME: only leases whose name starts with this")
		setUsage(fs, stderr, "fenceq lease show [NAME] [--prefix P] [--json]", "Show one lease, or list them.")
	default:
		return usageError{fmt.Sprintf("unknown lease action %q; %s", action, usage)}
	}
	nArgs, maxArgs := 1, 1
	switch action {
	case "renew", "release", "check":
		nArgs, maxArgs = 2, 2
	case "show":
		nArgs, maxArgs = 0, 1
	}
	pos, err := parseCommand(fs, args, nArgs, maxArgs)
	if err != nil {
		return err
	}
	if holder != nil && *holder == "" {
		return usageError{fmt.Sprintf("fenceq lease %s needs --holder", action)}
	}
	var token uint64
	if len(pos) == 2 {
		if token, err = parseToken(pos[1]); err != nil {
			return err
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()

	var l client.Lease
	switch action {
	case "acquire":
		l, err = c.AcquireLease(ctx, pos[0], client.AcquireLeaseParams{Holder: *holder, TTL: *ttl, Wait: *wait})
	case "renew":
		l, err = c.RenewLease(ctx, pos[0], client.RenewLeaseParams{Holder: *holder, FencingToken: token, TTL: *ttl})
	case "release":
		l, err = c.ReleaseLease(ctx, pos[0], *holder, token)
	case "check":
		chk, err := c.CheckLease(ctx, pos[0], token)
		if err != nil {
			return cliError(c, err)
		}
		if *asJSON {
			return printJSON(stdout, chk)
		}
		fmt.Fprintf(stdout, "token %d is current for %s until %s\n", chk.FencingToken, chk.Name, when(chk.ExpiresAt))
		return nil
	case "show":
		if len(pos) == 0 {
			return listLeases(ctx, c, *prefix, *asJSON, stdout)
		}
		l, err = c.GetLease(ctx, pos[0])
	}
	if err != nil {
		return cliError(c, err)
	}
	switch {
	case *asJSON:
		return printJSON(stdout, l)
	case quiet != nil && *quiet:
		fmt.Fprintln(stdout, l.FencingToken)
	case action == "acquire":
		fmt.Fprintf(stdout, "acquired %s: fencing token %d, held by %s until %s\n", l.Name, l.FencingToken, l.Holder, when(l.ExpiresAt))
	case action == "renew":
		fmt.Fprintf(stdout, "renewed %s (token %d) until %s\n", l.Name, l.FencingToken, when(l.ExpiresAt))
	case action == "release":
		fmt.Fprintf(stdout, "released %s (token %d)\n", l.Name, l.FencingToken)
	default:
		printLease(stdout, l)
	}
	return nil
}

func printLease(w io.Writer, l client.Lease) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", l.Name)
	fmt.Fprintf(tw, "held\t%v\n", l.Held)
	fmt.Fprintf(tw, "fencing token\t%d\n", l.FencingToken)
	fmt.Fprintf(tw, "holder\t%s\n", orDash(l.Holder))
	fmt.Fprintf(tw, "expires\t%s\n", when(l.ExpiresAt))
	fmt.Fprintf(tw, "acquired\t%s\n", when(l.AcquiredAt))
	fmt.Fprintf(tw, "updated\t%s\n", when(l.UpdatedAt))
	tw.Flush()
}

func listLeases(ctx context.Context, c *client.Client, prefix string, asJSON bool, stdout io.Writer) error {
	out := client.LeasePage{Leases: []client.Lease{}}
	p := client.ListLeasesParams{Prefix: prefix}
	for {
		page, err := c.ListLeases(ctx, p)
		if err != nil {
			return cliError(c, err)
		}
		out.Leases = append(out.Leases, page.Leases...)
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	if asJSON {
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTOKEN\tHELD\tHOLDER\tEXPIRES")
	for _, l := range out.Leases {
		exp := "-"
		if !l.ExpiresAt.IsZero() {
			exp = l.ExpiresAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%s\t%s\n", l.Name, l.FencingToken, l.Held, orDash(l.Holder), exp)
	}
	return tw.Flush()
}

// auditCLI: "fenceq audit verify" offline on a file (--db, the existing
// command) or, when --db is not given but --server (or FENCEQ_SERVER) is,
// by the running server (GET /v1/audit/verify).
func auditCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "archive" {
		return auditArchiveCommand(ctx, args[1:], stdout, stderr) // audit_archive.go
	}
	if len(args) == 0 || args[0] != "verify" {
		return usageError{"usage: fenceq audit verify [--db FILE | --server URL] [--json], or fenceq audit archive --out FILE"}
	}
	fs := newFlagSet("fenceq audit verify", stderr)
	path := fs.String("db", "./fenceq.db", "verify this bbolt file, or an archive of \"fenceq audit archive\", offline (read-only; a copy while a server holds it)")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	setUsage(fs, stderr, "fenceq audit verify [--db FILE | --server URL] [--json]",
		"Walk the audit chain and report the first record that does not verify (exit 1 when the chain is broken).\n"+
			"With --db (or neither flag) the file is read offline: a database, or an archive file written by\n"+
			"\"fenceq audit archive\"; with --server (or FENCEQ_SERVER) and no --db, the running server walks it (admin role).")
	if _, err := parseCommand(fs, args[1:], 0, 0); err != nil {
		return err
	}
	dbGiven, serverGiven := false, false
	fs.Visit(func(f *flag.Flag) {
		dbGiven = dbGiven || f.Name == "db"
		serverGiven = serverGiven || f.Name == "server"
	})
	if dbGiven || !serverGiven {
		return auditCommand(ctx, []string{"verify", "--db=" + *path, "--json=" + strconv.FormatBool(*asJSON)}, stdout, stderr)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	rep, err := c.VerifyAudit(ctx)
	if err != nil {
		return cliError(c, err)
	}
	return printAuditReport(stdout, rep, *asJSON, "the server at "+c.BaseURL())
}

// printAuditReport prints a chain verification, the server's or a file's,
// in one format, and returns an error naming what when the chain is broken.
func printAuditReport(stdout io.Writer, rep client.AuditReport, asJSON bool, what string) error {
	if asJSON {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	} else if rep.OK && rep.StartSeq > 0 {
		fmt.Fprintf(stdout, "ok: %d records after the checkpoint %d (older records were archived), head %d %s\n", rep.Records, rep.StartSeq, rep.HeadSeq, rep.HeadHash)
	} else if rep.OK {
		fmt.Fprintf(stdout, "ok: %d records, head %d %s\n", rep.Records, rep.HeadSeq, rep.HeadHash)
	} else {
		fmt.Fprintf(stdout, "BROKEN at sequence %d: %s (head %d %s)\n", rep.FirstBroken, rep.Reason, rep.HeadSeq, rep.HeadHash)
	}
	if !rep.OK {
		return fmt.Errorf("audit chain of %s is broken at sequence %d", what, rep.FirstBroken)
	}
	return nil
}

// backupCommand: fenceq backup --out FILE
func backupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fenceq backup", stderr)
	cf := addClientFlags(fs)
	out := fs.String("out", "", "file to write the snapshot to (required; - for stdout)")
	verify := fs.Bool("verify", true, "open the written file and check it (bbolt consistency and the audit chain)")
	asJSON := fs.Bool("json", false, "print {\"file\",\"bytes\",\"verified\",\"audit_records\"} as JSON")
	setUsage(fs, stderr, "fenceq backup --out FILE [--verify=false] [--json]",
		"Download a consistent snapshot of the server's database (admin role). It is written to FILE.partial\n"+
			"and renamed to FILE only when complete and verified. To restore, stop the server and use the file as --db.")
	if _, err := parseCommand(fs, args, 0, 0); err != nil {
		return err
	}
	if *out == "" {
		return usageError{"fenceq backup needs --out FILE (or --out - for stdout)"}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *out == "-" {
		_, err := c.Backup(ctx, stdout)
		return cliError(c, err)
	}
	tmp := *out + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
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
		return cliError(c, err)
	}
	var records uint64
	if *verify {
		if records, err = verifyBackup(ctx, tmp); err != nil {
			return fmt.Errorf("the downloaded snapshot does not verify (kept nothing): %w", err)
		}
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(*out)); err == nil {
		_ = d.Sync() // make the rename durable
		d.Close()
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"file": *out, "bytes": n, "verified": *verify, "audit_records": records})
	}
	if *verify {
		fmt.Fprintf(stdout, "wrote %s: %d bytes, consistent, audit chain ok (%d records)\n", *out, n, records)
	} else {
		fmt.Fprintf(stdout, "wrote %s: %d bytes\n", *out, n)
	}
	return nil
}

// verifyBackup opens a downloaded snapshot read-only and checks it.
func verifyBackup(ctx context.Context, path string) (uint64, error) {
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		return 0, err
	}
	rep, err := s.VerifyAudit(ctx)
	if err != nil {
		return 0, err
	}
	if !rep.OK {
		return 0, fmt.Errorf("audit chain broken at sequence %d: %s", rep.FirstBroken, rep.Reason)
	}
	return rep.Records, nil
}
