package bolt

import (
	"bytes"
	"time"

	"github.com/fenceq/fenceq/lease"
	bbolt "go.etcd.io/bbolt"
)

// The waits themselves — long-polls, hand-offs, acquires, StopWaiting —
// are package wait's (s.waits). What is the engine's is what it reads:
// after a commit, the earliest run_at or lease expiry it wrote arms the
// one timer (armTimer), and when the timer fires it counts, per queue a
// claim waits on, the jobs that have become claimable by time and signals
// that many claims (timerFired).

func (s *Store) armTimer(t time.Time) {
	s.waits.WakeAt(t, t.Sub(s.opts.Now()), s.timerFired)
}

// timerFired wakes one waiter per job that has become claimable by time
// (due run_at, expired lease) in a queue somebody waits on, then re-arms
// for the next such time.
func (s *Store) timerFired() {
	queues := s.waits.Queues()
	if len(queues) == 0 {
		return
	}
	due := map[string]int{}
	var next time.Time
	now := s.opts.Now()
	_ = s.view(func(tx *bbolt.Tx) error {
		due, next = claimableByTime(tx, now, queues)
		return nil
	})
	for q, n := range due {
		s.waits.Signal(q, n)
	}
	if !next.IsZero() {
		s.armTimer(next)
	}
}

// claimableByTime counts, per queue of queues, the scheduled jobs whose
// run_at has come (from the queue's own scheduled index, so that other
// queues' due jobs cannot hide them) and the claims whose lease has
// expired, up to a bound per queue and index, and returns the earliest
// future time at which another becomes claimable. A scan stopped at its
// bound may have left claimable jobs uncounted: it then asks to be run
// again shortly (next), so that their waiters are woken too.
func claimableByTime(tx *bbolt.Tx, now time.Time, queues []string) (map[string]int, time.Time) {
	const bound = 1000
	due := map[string]int{}
	queues = unpausedQueues(tx, queues) // a paused queue's jobs wake nobody
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, q := range queues {
		prefix := queuePrefix(q)
		for _, b := range [][]byte{bucketScheduledQueue, bucketClaimed} {
			c := tx.Bucket(b).Cursor()
			n := 0
			k, _ := c.Seek(prefix)
			for ; k != nil && bytes.HasPrefix(k, prefix) && n < bound; k, _ = c.Next() {
				at := time.Unix(0, timeFromKey(k, len(prefix)))
				if !lease.Expired(at, now) { // at is after now
					earliest(at)
					break
				}
				n++
			}
			if n == bound && k != nil && bytes.HasPrefix(k, prefix) {
				earliest(now.Add(time.Millisecond)) // stopped at the bound: look again
			}
			if n > 0 {
				due[q] += n
			}
		}
	}
	return due, next
}
