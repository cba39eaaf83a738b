package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/wait"
	"github.com/jackc/pgx/v5"
)

// The replicas of one schema share a LISTEN/NOTIFY channel (Store.channel,
// "fenceq" in the public schema). A batch sends, on commit, one
// notification per queue and kind:
//
//	"+ <n> <queue>"    n jobs of queue became available
//	"a <queue>"        jobs of queue became available: every claim looks
//	"l <ns> <queue>"   a job of queue becomes claimable at ns (run_at, lease end)
//	"r <name>"         the named lease was released
//
// "+" wakes as many claims as jobs became available. It is always followed,
// in the same transaction, by "a" for the same queue, which a build before
// "+" reads (it wakes every claim) and this build skips after a "+" of the
// same sender; an "a" alone (a resume, an older build) wakes every claim.
// A transaction's notifications reach a listener together and in the order
// sent (PostgreSQL queues them under one lock at commit).

// notifyAvailable: every claim of queue looks again (a resume).
func notifyAvailable(queue string) string { return "a " + queue }

// notifyOneAvailable notes one job of queue that became available; the
// batch sends them counted (notifyPayloads).
func notifyOneAvailable(queue string) string { return "1 " + queue }

func notifyLater(queue string, ns int64) string {
	return "l " + strconv.FormatInt(ns, 10) + " " + queue
}

func notifyReleased(name string) string { return "r " + name }

// notifyPayloads turns a batch's notes into the payloads it sends, sorted
// (every "+" before its "a") and without repeats: per queue, the jobs that
// became available as one "+ <n>" and an "a" for older builds; a queue
// that also has a plain "a" (resumed) gets only that.
func notifyPayloads(notes []string) []string {
	counts := map[string]int{}
	out := make([]string, 0, len(notes))
	for _, n := range notes {
		if q, ok := strings.CutPrefix(n, "1 "); ok {
			counts[q]++
			continue
		}
		out = append(out, n)
	}
	for q, n := range counts {
		if !slices.Contains(out, notifyAvailable(q)) {
			out = append(out, "+ "+strconv.Itoa(n)+" "+q, notifyAvailable(q))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// countedKey is a queue whose "+" a sender (its backend's pid) sent last:
// its "a" that follows is skipped.
type countedKey struct {
	pid   uint32
	queue string
}

// handOff claims rec, just made available, for the waiting claim wt in w's
// transaction: enqueue→claim costs one commit. The claim is audited after
// the change that made rec available (callers audit first). rec becomes
// the claimed job, which the caller answers with.
func handOff(w *writer, rec *db.JobRecord, wt *wait.Claim) error {
	w.onAbort = append(w.onAbort, func() { w.s.waits.Deliver(wt, nil) })
	next, ev, err := db.Claim(rec, wt.Request(), w.now)
	if err != nil {
		return err
	}
	w.audit(ev)
	if err := putJob(w, rec, &next); err != nil {
		return err
	}
	w.claimed = append(w.claimed, next.Queue)
	job := next.Job()
	w.after = append(w.after, func() { w.s.waits.Deliver(wt, &job) })
	*rec = next
	return nil
}

// listen holds a connection that LISTENs for the notifications of every
// replica (this one's included) and wakes the waiters they concern. It
// reconnects when the connection drops, then wakes every waiter once.
func (s *Store) listen(cfg *pgx.ConnConfig) {
	defer close(s.listened)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.closing
		cancel()
	}()
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{s.channel}.Sanitize())
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			if first {
				first = false
				close(s.listening)
			} else {
				// Notifications sent while it was away are lost: everyone
				// looks again.
				clear(s.counted)
				s.waits.WakeAll()
			}
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				s.dispatch(n.PID, n.Payload)
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// dispatch wakes the waiters a notification concerns. It runs on the
// listener's goroutine only.
func (s *Store) dispatch(pid uint32, payload string) {
	kind, rest, _ := strings.Cut(payload, " ")
	switch kind {
	case "+":
		count, queue, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(count)
		if err != nil || n <= 0 {
			s.waits.SignalAll(queue)
			return
		}
		if len(s.counted) > 4096 {
			clear(s.counted) // an "a" never came: forget rather than grow
		}
		s.counted[countedKey{pid, queue}] = true
		s.waits.Signal(queue, n)
	case "a":
		if k := (countedKey{pid, rest}); s.counted[k] {
			delete(s.counted, k) // counted by the "+" before it
			return
		}
		s.waits.SignalAll(rest)
	case "l":
		ns, queue, _ := strings.Cut(rest, " ")
		if t, err := strconv.ParseInt(ns, 10, 64); err == nil {
			s.waits.Later(queue, t)
		}
	case "r":
		s.waits.WakeName(rest)
	}
}

// WaitingClaims is the number of this replica's claims long-polling queue
// that found nothing and sleep.
func (s *Store) WaitingClaims(queue string) int { return s.waits.Sleeping(queue) }

// WaitingAcquires is the number of this replica's acquires waiting for
// the named lease.
func (s *Store) WaitingAcquires(name string) int { return s.waits.Acquiring(name) }
