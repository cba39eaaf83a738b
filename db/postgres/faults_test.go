package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// newLongSchema creates a schema whose name is n bytes long (PostgreSQL
// allows 63) and returns a URL whose search_path is it.
func newLongSchema(t *testing.T, n int) string {
	t.Helper()
	base := testURL(t)
	name := "fenceq_long_" + strings.Repeat("x", n-len("fenceq_long_")-8) + randHex(4)
	exec := func(sql string) error {
		conn, err := pgx.Connect(bg, base)
		if err != nil {
			return err
		}
		defer conn.Close(bg)
		_, err = conn.Exec(bg, sql)
		return err
	}
	if err := exec(`CREATE SCHEMA ` + pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec(`DROP SCHEMA IF EXISTS ` + pgx.Identifier{name}.Sanitize() + ` CASCADE`) })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestNotifyChannel_ALongSchemaNameWritesAndWakesOtherReplicas: a legal
// 60-byte schema name (issue 30 item 7): enqueues succeed, and a long-poll
// on another replica is woken through the notify channel.
func TestNotifyChannel_ALongSchemaNameWritesAndWakesOtherReplicas(t *testing.T) {
	u := newLongSchema(t, 60)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	got := make(chan []db.Job, 1)
	go func() {
		jobs, err := b.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "wb", Queues: []string{"q"}, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	waitSleeping(t, b, "q")
	r, err := a.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"})
	j := r.Job
	if err != nil {
		t.Fatalf("EnqueueJob() in a 60-byte schema = %v, want a job", err)
	}
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != j.ID {
			t.Fatalf("B's long-poll got %+v, want job %d", jobs, j.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B's long-poll was not woken by the enqueue on A")
	}
}

// TestNotifyChannel_NamesFitAndStayApart: the channel of a short schema is
// what earlier builds used (their replicas hear this one's), a long one
// fits in 63 bytes, and two long names that share their first 63 bytes get
// channels of their own.
func TestNotifyChannel_NamesFitAndStayApart(t *testing.T) {
	for schema, want := range map[string]string{"public": "fenceq", "team_a": "fenceq.team_a",
		strings.Repeat("s", 56): "fenceq." + strings.Repeat("s", 56)} {
		if got := notifyChannel(schema); got != want {
			t.Errorf("notifyChannel(%q) = %q, want %q", schema, got, want)
		}
	}
	seen := map[string]string{}
	for _, schema := range []string{strings.Repeat("s", 57), strings.Repeat("s", 63), strings.Repeat("s", 62) + "t", strings.Repeat("é", 31)} {
		c := notifyChannel(schema)
		if len(c) > 63 {
			t.Errorf("notifyChannel(%q) = %q: %d bytes, want at most 63", schema, c, len(c))
		}
		if other, ok := seen[c]; ok {
			t.Errorf("schemas %q and %q share channel %q", schema, other, c)
		}
		seen[c] = schema
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
