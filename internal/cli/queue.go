package cli

// fenceq queue pause|resume|list: the queue commands, each a call[T] like
// the others.

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/fenceq/fenceq/api/client"
)

// queuePauseCmd is "fenceq queue pause QUEUE" or "fenceq queue resume QUEUE".
func queuePauseCmd(action string) call[client.QueuePause] {
	k := call[client.QueuePause]{
		name: "queue " + action, synopsis: "fenceq queue " + action + " QUEUE [--json]", jsonHelp: "print the queue's pause as JSON",
		args: [2]int{1, 1},
		about: "Pause a queue (admin role): it keeps taking enqueues but gives no claims, long-polls included,\n" +
			"until \"fenceq queue resume\"; jobs already claimed can still be heartbeaten, completed and failed.\n" +
			"Pausing a paused queue changes nothing and is not an error.",
		bind: noFlags(func(ctx context.Context, c *client.Client, pos []string) (client.QueuePause, error) {
			return c.PauseQueue(ctx, pos[0])
		}),
		show: func(e Env, p client.QueuePause) error {
			state := "paused"
			if !p.Changed {
				state = "was already paused"
			}
			_, err := fmt.Fprintf(e.Stdout, "queue %s %s (by %s, %s)\n", p.Queue, state, orDash(p.PausedBy), when(p.PausedAt))
			return err
		},
	}
	if action == "resume" {
		k.about = "Resume a paused queue (admin role): claims take its jobs again and waiting long-polls are woken.\n" +
			"Resuming a queue that is not paused changes nothing and is not an error."
		k.bind = noFlags(func(ctx context.Context, c *client.Client, pos []string) (client.QueuePause, error) {
			return c.ResumeQueue(ctx, pos[0])
		})
		k.show = func(e Env, p client.QueuePause) error {
			state := "resumed"
			if !p.Changed {
				state = "was not paused"
			}
			_, err := fmt.Fprintf(e.Stdout, "queue %s %s\n", p.Queue, state)
			return err
		}
	}
	return k
}

// queueListCmd is "fenceq queue list".
var queueListCmd = call[[]client.QueueCounts]{
	name: "queue list", synopsis: "fenceq queue list [--json]", jsonHelp: "print {\"queues\":[…]} as JSON (GET /v1/queues)",
	about: "List the queues with jobs or a pause: whether each is paused, and its job counts per state.",
	bind: noFlags(func(ctx context.Context, c *client.Client, _ []string) ([]client.QueueCounts, error) {
		qs, err := c.Queues(ctx)
		if qs == nil {
			qs = []client.QueueCounts{}
		}
		return qs, err
	}),
	jsonOf: func(qs []client.QueueCounts) any {
		return struct {
			Queues []client.QueueCounts `json:"queues"`
		}{qs}
	},
	show: func(e Env, qs []client.QueueCounts) error {
		if len(qs) == 0 {
			_, err := fmt.Fprintln(e.Stdout, "(no queues)")
			return err
		}
		tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "QUEUE\tPAUSED\t")
		for _, s := range client.States {
			fmt.Fprintf(tw, "%s\t", strings.ToUpper(s))
		}
		fmt.Fprintln(tw)
		for _, q := range qs {
			paused := "no"
			if q.Paused {
				paused = fmt.Sprintf("since %s by %s", q.PausedAt.Local().Format("2006-01-02T15:04:05Z07:00"), orDash(q.PausedBy))
			}
			fmt.Fprintf(tw, "%s\t%s\t", q.Queue, paused)
			for _, s := range client.States {
				fmt.Fprintf(tw, "%d\t", q.Counts[s])
			}
			fmt.Fprintln(tw)
		}
		return tw.Flush()
	},
}
