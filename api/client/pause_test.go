package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

func TestClient_PauseAndResumeAQueue(t *testing.T) {
	s := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, s.URL)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, client.NewJob{Queue: "emails"}); err != nil {
		t.Fatal(err)
	}
	p, err := c.PauseQueue(ctx, "emails")
	if err != nil || !p.Paused || !p.Changed || p.PausedBy != "local" || p.PausedAt.IsZero() {
		t.Fatalf("PauseQueue() = %+v, %v; want paused by local, changed", p, err)
	}
	if again, err := c.PauseQueue(ctx, "emails"); err != nil || again.Changed || !again.PausedAt.Equal(p.PausedAt) {
		t.Errorf("PauseQueue() again = %+v, %v; want changed false, same time", again, err)
	}
	queues, err := c.Queues(ctx)
	if err != nil || len(queues) != 1 || !queues[0].Paused || !queues[0].PausedAt.Equal(p.PausedAt) || queues[0].Counts[client.StateAvailable] != 1 {
		t.Fatalf("Queues() = %+v, %v; want emails paused with 1 available", queues, err)
	}
	if _, ok, err := c.Claim(ctx, client.ClaimParams{Worker: "w", Queues: []string{"emails"}, Wait: 100 * time.Millisecond}); err != nil || ok {
		t.Errorf("Claim() of the paused queue = %v, %v; want none", ok, err)
	}
	if r, err := c.ResumeQueue(ctx, "emails"); err != nil || r.Paused || !r.Changed {
		t.Fatalf("ResumeQueue() = %+v, %v; want running, changed", r, err)
	}
	if _, ok, err := c.Claim(ctx, client.ClaimParams{Worker: "w", Queues: []string{"emails"}}); err != nil || !ok {
		t.Errorf("Claim() after the resume = %v, %v; want the job", ok, err)
	}
	if _, err := c.PauseQueue(ctx, "no spaces"); !client.IsCode(err, client.CodeInvalidArgument) {
		t.Errorf("PauseQueue(bad name) = %v, want invalid_argument", err)
	}
}
