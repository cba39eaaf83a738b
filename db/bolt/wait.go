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
// run_at has come and the claims whose lease has expired (up to a bound),
// and returns the earliest future time at which another becomes claimable.
func claimableByTime(tx *bbolt.Tx, now time.Time, queues []string) (map[string]int, time.Time) {
	const bound = 1000
	due := map[string]int{}
	waiting := map[string]bool{}
	queues = unpausedQueues(tx, queues) // a paused queue's jobs wake nobody
	for _, q := range queues {
		waiting[q] = true
	}
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	c := tx.Bucket(bucketScheduled).Cursor()
	scanned := 0
	for k, _ := c.First(); k != nil && scanned < bound; k, _ = c.Next() {
		scanned++
		at := time.Unix(0, timeFromKey(k, 0))
		if at.After(now) {
			earliest(at)
			break
		}
		if rec, err := getJob(tx, idFromKey(k)); err == nil && waiting[rec.Queue] && due[rec.Queue] < bound {
			due[rec.Queue]++
		}
	}
	for _, q := range queues {
		prefix := queuePrefix(q)
		c := tx.Bucket(bucketClaimed).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && due[q] < bound; k, _ = c.Next() {
			at := time.Unix(0, timeFromKey(k, len(prefix)))
			if !lease.Expired(at, now) {
				earliest(at)
				break
			}
			due[q]++
		}
	}
	return due, next
}
