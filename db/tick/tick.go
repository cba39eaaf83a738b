// Package tick runs a store's schedules: a loop that calls FireSchedules
// until a pass has nothing more to decide, then sleeps until the earliest
// next fire time — at most MaxSleep, because another replica may add a
// schedule that fires sooner — or until it is woken (a schedule put or
// resumed through this process). Every replica may run it: the store
// decides each tick once (db.Schedules.FireSchedules), so no leader is
// elected. Errors are logged and retried after a backoff; they never end
// the loop. A schedule whose stored spec does not compile is skipped by
// the store and logged at WARN once a round (db.FireResult.Broken). It
// imports package db only.
package tick

import (
	"context"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/db"
)

// Defaults of Options.
const (
	DefaultLimit      = 100
	DefaultMaxSleep   = time.Second
	DefaultTimeout    = 10 * time.Second
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 30 * time.Second
	// MinSleep is the shortest sleep after a pass that decided no
	// schedule although the earliest next fire time had come by the
	// loop's clock: a database whose clock is behind the process's must
	// not make the loop spin.
	MinSleep = 10 * time.Millisecond
)

// Firer is what the loop needs of a store: every db.Store is one.
type Firer interface {
	FireSchedules(ctx context.Context, limit int) (db.FireResult, error)
}

// Options configure Run. The zero value is usable.
type Options struct {
	// Limit is how many schedules one FireSchedules call decides; the
	// loop calls again at once while a call decides Limit. Default
	// DefaultLimit; at most db.MaxSchedules.
	Limit int
	// MaxSleep bounds a sleep between passes. Default DefaultMaxSleep.
	MaxSleep time.Duration
	// Timeout is each FireSchedules call's deadline; keep it below the
	// server's write timeout, so that the call's commit does not hold
	// requests' commits beyond theirs. Default DefaultTimeout.
	Timeout time.Duration
	// Backoff is the wait after a failed call, doubled at each failure
	// in a row up to MaxBackoff. Defaults DefaultBackoff, DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Wake, when it receives, ends a sleep at once. Optional.
	Wake <-chan struct{}
	// Logger receives failures, and the schedules skipped because their
	// spec does not compile. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock the sleeps are computed with. Default time.Now.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	o.Limit = min(o.Limit, db.MaxSchedules)
	if o.MaxSleep <= 0 {
		o.MaxSleep = DefaultMaxSleep
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff < o.Backoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.Backoff)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Run fires s's schedules until ctx is done, then returns nil.
func Run(ctx context.Context, s Firer, o Options) error {
	o.setDefaults()
	backoff := o.Backoff
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		res, decided, err := Round(ctx, s, o)
		if ctx.Err() != nil {
			return nil
		}
		var sleep time.Duration
		if err != nil {
			o.Logger.Error("schedules: fire", "err", err, "retry_in", backoff)
			sleep, backoff = backoff, min(2*backoff, o.MaxBackoff)
		} else {
			backoff = o.Backoff
			sleep = SleepFor(res, decided, o.Now(), o.MaxSleep)
		}
		for _, b := range res.Broken {
			o.Logger.Warn("schedules: skipped a due schedule whose spec does not compile", "schedule", b.Name, "err", b.Err)
		}
		if !wait(ctx, timer, sleep, o.Wake) {
			return nil
		}
	}
}

// Round is one round of the loop: FireSchedules calls, each with its own
// deadline, until one decides fewer than o.Limit schedules. It returns
// the last call's result, with the broken schedules of every call (each
// once, in the order first reported), and how many schedules the round
// decided.
func Round(ctx context.Context, s Firer, o Options) (db.FireResult, int, error) {
	o.setDefaults()
	decided := 0
	var broken []db.BrokenSchedule
	seen := map[string]bool{}
	for {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		res, err := s.FireSchedules(cctx, o.Limit)
		cancel()
		for _, b := range res.Broken {
			if !seen[b.Name] {
				seen[b.Name] = true
				broken = append(broken, b)
			}
		}
		res.Broken = broken
		if err != nil {
			return res, decided, err
		}
		decided += res.Schedules
		if res.Schedules < o.Limit || ctx.Err() != nil {
			return res, decided, nil
		}
	}
}

// SleepFor is how long the loop sleeps after a round whose last result
// was res at now: until res.Next, at most maxSleep; MinSleep when the
// next fire time has come but the round decided nothing.
func SleepFor(res db.FireResult, decided int, now time.Time, maxSleep time.Duration) time.Duration {
	if res.Next.IsZero() {
		return maxSleep
	}
	d := res.Next.Sub(now)
	if d <= 0 && decided == 0 {
		return MinSleep
	}
	return min(max(d, 0), maxSleep)
}

// wait sleeps for d, or until wake receives; it reports false when ctx
// ended first.
func wait(ctx context.Context, timer *time.Timer, d time.Duration, wake <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer.Reset(d)
	defer func() {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-wake:
	}
	return true
}
