package cli

// fenceq schedule put|list|get|delete|pause|resume|trigger: periodic jobs
// (docs/schedules.md), each a call[T] like the others.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fenceq/fenceq/api/client"
)

// schedulePutCmd is "fenceq schedule put NAME (--cron EXPR | --every DUR) …".
var schedulePutCmd = call[scheduleResult]{
	name: "schedule put",
	synopsis: "fenceq schedule put NAME (--cron EXPR | --every DUR) [--timezone Z] [--catchup P] [--catchup-window D]\n" +
		"       [--overlap P] [--jitter D] [--start-at T] --queue Q [--kind K] [--payload JSON|-] [--priority N] [--max-attempts N]",
	about: "Create the schedule NAME, or replace it (admin role): one job on --queue at every tick of --cron\n" +
		"(five fields, six with seconds, or @hourly-style, read in --timezone) or of --every. A replaced\n" +
		"schedule computes its next tick from now and keeps its pause. The timing rules: docs/schedules.md.",
	jsonHelp: "print the schedule as JSON",
	args:     [2]int{1, 1},
	bind: func(fs *flag.FlagSet, e Env) func([]string) (callFunc[scheduleResult], error) {
		cron := fs.String("cron", "", "cron expression: five fields (minute hour day month weekday), six with seconds first, or @hourly, @daily, …")
		every := fs.Duration("every", 0, "interval instead of --cron, at least 1s (15m, 1h)")
		tz := fs.String("timezone", "", "IANA zone the cron fields are read in (default UTC)")
		catchup := fs.String("catchup", "", "missed ticks after downtime: none, latest (default) or all")
		window := fs.Duration("catchup-window", 0, "with --catchup all: how far back missed ticks fire (default 1h, at most 168h)")
		overlap := fs.String("overlap", "", "allow (default) or skip: drop a tick while the last job is unfinished")
		jitter := fs.Duration("jitter", 0, "spread each job's run_at over [tick, tick+jitter)")
		startAt := fs.String("start-at", "", "with --every: the first tick, RFC 3339 (default: now cut to the second)")
		queue := fs.String("queue", "", "queue each job is put on (required)")
		kind := fs.String("kind", "", "free label for the worker")
		payload := fs.String("payload", "", "each job's payload: a JSON value, or - to read it from stdin (default null)")
		priority := fs.Int64("priority", 0, "higher is claimed first")
		maxAttempts := fs.Uint64("max-attempts", 0, "claims allowed before a job goes dead (0: the server's default)")
		return func(pos []string) (callFunc[scheduleResult], error) {
			if (*cron == "") == (*every == 0) {
				return nil, UsageError{"give exactly one of --cron and --every"}
			}
			if *queue == "" {
				return nil, UsageError{"--queue is required: the queue each tick's job is put on"}
			}
			s := client.NewSchedule{Cron: *cron, Every: *every, Timezone: *tz, Catchup: *catchup, CatchupWindow: *window,
				Overlap: *overlap, Jitter: *jitter, Queue: *queue, Kind: *kind, Priority: *priority, MaxAttempts: *maxAttempts}
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
				s.Payload = json.RawMessage(raw)
			}
			if *startAt != "" {
				t, err := time.Parse(time.RFC3339Nano, *startAt)
				if err != nil {
					return nil, UsageError{fmt.Sprintf("--start-at %q is not an RFC 3339 time (2031-01-02T15:04:05Z)", *startAt)}
				}
				s.StartAt = t
			}
			return func(ctx context.Context, c *client.Client) (scheduleResult, error) {
				sc, created, err := c.PutSchedule(ctx, pos[0], s)
				verb := "replaced"
				if created {
					verb = "created"
				}
				return scheduleResult{sc, verb}, err
			}, nil
		}
	},
	jsonOf: func(r scheduleResult) any { return r.Schedule },
	show:   func(e Env, r scheduleResult) error { return showSchedule(e, r) },
}

// scheduleResult is a schedule and what the command did to it.
type scheduleResult struct {
	client.Schedule
	verb string // "created", "paused", … ("" for get)
}

func showSchedule(e Env, r scheduleResult) error {
	if r.verb != "" {
		fmt.Fprintf(e.Stdout, "schedule %s %s\n", r.Name, r.verb)
	}
	printSchedule(e.Stdout, r.Schedule)
	return nil
}

// timing is a schedule's cron or interval and zone in one cell.
func timing(s client.Schedule) string {
	if s.Cron != "" {
		return s.Cron + " (" + s.Timezone + ")"
	}
	return "every " + s.Every().String()
}

// printSchedule shows every field of a schedule that has a value.
func printSchedule(w io.Writer, s client.Schedule) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("name", s.Name)
	row("timing", timing(s))
	if !s.StartAt.IsZero() {
		row("start at", s.StartAt.UTC().Format(time.RFC3339))
	}
	row("catchup", s.Catchup)
	if s.CatchupWindowMs != 0 {
		row("catchup window", (time.Duration(s.CatchupWindowMs) * time.Millisecond).String())
	}
	row("overlap", s.Overlap)
	if s.JitterMs != 0 {
		row("jitter", (time.Duration(s.JitterMs) * time.Millisecond).String())
	}
	row("queue", s.Job.Queue)
	row("kind", s.Job.Kind)
	row("payload", string(s.Job.Payload))
	if s.Paused {
		row("paused", fmt.Sprintf("since %s by %s", when(s.PausedAt), orDash(s.PausedBy)))
	} else {
		row("next fire", when(s.NextFireAt))
		var later []string
		for _, t := range s.NextFires[min(1, len(s.NextFires)):] {
			later = append(later, t.UTC().Format(time.RFC3339))
		}
		row("then", strings.Join(later, ", "))
	}
	if s.LastJob != nil {
		row("last job", fmt.Sprintf("%d for %s (%s)", s.LastJob.ID, s.LastJob.ScheduledFor.UTC().Format(time.RFC3339), orDash(s.LastJob.State)))
	}
	row("dropped ticks", fmt.Sprintf("%d missed, %d skipped", s.MissedTicks, s.SkippedTicks))
	row("created", fmt.Sprintf("%s by %s", when(s.CreatedAt), orDash(s.CreatedBy)))
	row("updated", when(s.UpdatedAt))
	tw.Flush()
}

var scheduleGetCmd = call[scheduleResult]{
	name: "schedule get", synopsis: "fenceq schedule get NAME [--json]", jsonHelp: "print the schedule as JSON",
	about: "Show a schedule: its timing, job, next fire times, last job and dropped ticks.",
	args:  [2]int{1, 1},
	bind: noFlags(func(ctx context.Context, c *client.Client, pos []string) (scheduleResult, error) {
		sc, err := c.GetSchedule(ctx, pos[0])
		return scheduleResult{Schedule: sc}, err
	}),
	jsonOf: func(r scheduleResult) any { return r.Schedule },
	show:   showSchedule,
}

// scheduleActionCmd is "fenceq schedule delete|pause|resume NAME".
func scheduleActionCmd(action string) call[scheduleResult] {
	abouts := map[string]string{
		"delete": "Delete a schedule (admin role); the jobs it enqueued stay.",
		"pause":  "Pause a schedule (admin role): its ticks are dropped until \"fenceq schedule resume\", and not caught up.",
		"resume": "Resume a paused schedule (admin role): its next tick is computed from now.",
	}
	do := map[string]func(*client.Client, context.Context, string) (client.Schedule, error){
		"delete": (*client.Client).DeleteSchedule, "pause": (*client.Client).PauseSchedule, "resume": (*client.Client).ResumeSchedule,
	}[action]
	verb := map[string]string{"delete": "deleted", "pause": "paused", "resume": "resumed"}[action]
	return call[scheduleResult]{
		name: "schedule " + action, synopsis: "fenceq schedule " + action + " NAME [--json]", jsonHelp: "print the schedule as JSON",
		about: abouts[action], args: [2]int{1, 1},
		bind: noFlags(func(ctx context.Context, c *client.Client, pos []string) (scheduleResult, error) {
			sc, err := do(c, ctx, pos[0])
			return scheduleResult{sc, verb}, err
		}),
		jsonOf: func(r scheduleResult) any { return r.Schedule },
		show: func(e Env, r scheduleResult) error {
			if action == "delete" {
				_, err := fmt.Fprintf(e.Stdout, "schedule %s deleted\n", r.Name)
				return err
			}
			return showSchedule(e, r)
		},
	}
}

var scheduleTriggerCmd = call[client.Job]{
	name: "schedule trigger", synopsis: "fenceq schedule trigger NAME [--json]", jsonHelp: "print the job as JSON",
	about: "Enqueue the schedule's job now (admin role), without moving its next tick.",
	args:  [2]int{1, 1},
	bind: noFlags(func(ctx context.Context, c *client.Client, pos []string) (client.Job, error) {
		return c.TriggerSchedule(ctx, pos[0])
	}),
	quiet: func(j client.Job) any { return j.ID }, quietHelp: "print only the job id",
	show: func(e Env, j client.Job) error {
		_, err := fmt.Fprintf(e.Stdout, "enqueued job %d on queue %s for schedule %s\n", j.ID, j.Queue, j.Schedule)
		return err
	},
}

// scheduleListCmd is "fenceq schedule list".
var scheduleListCmd = call[[]client.Schedule]{
	name: "schedule list", synopsis: "fenceq schedule list [--json]", jsonHelp: "print {\"schedules\":[…]} as JSON",
	about: "List every schedule: its timing, next fire, last job and its state, and dropped ticks.",
	bind: noFlags(func(ctx context.Context, c *client.Client, _ []string) ([]client.Schedule, error) {
		out := []client.Schedule{}
		for after := ""; ; {
			page, err := c.ListSchedules(ctx, client.ListSchedulesParams{After: after, Limit: 1000})
			if err != nil {
				return out, err
			}
			out = append(out, page.Schedules...)
			if page.Next == "" || len(page.Schedules) == 0 {
				return out, nil
			}
			after = page.Next
		}
	}),
	jsonOf: func(s []client.Schedule) any {
		return struct {
			Schedules []client.Schedule `json:"schedules"`
		}{s}
	},
	show: func(e Env, ss []client.Schedule) error {
		if len(ss) == 0 {
			_, err := fmt.Fprintln(e.Stdout, "(no schedules)")
			return err
		}
		tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTIMING\tQUEUE\tNEXT FIRE\tLAST JOB\tMISSED\tSKIPPED")
		for _, s := range ss {
			next := when(s.NextFireAt)
			if s.Paused {
				next = "paused"
			}
			last := "-"
			if s.LastJob != nil {
				last = fmt.Sprintf("%d (%s)", s.LastJob.ID, orDash(s.LastJob.State))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.Name, timing(s), s.Job.Queue, next, last, s.MissedTicks, s.SkippedTicks)
		}
		return tw.Flush()
	},
}
