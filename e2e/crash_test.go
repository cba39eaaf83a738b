//go:build linux

package e2e

// kill -9 under load loses nothing acknowledged (docs/guarantees.md).
//
// Longer runs: FENCEQ_CRASHES=200 go test -run TestCrash -v ./e2e

import (
	mrand "math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

func TestCrash_KillNineUnderLoadLosesNothingAcknowledged(t *testing.T) {
	crashes := crashCount(t)
	started := time.Now()
	path := filepath.Join(t.TempDir(), "crash.db")
	run := randomHex(t, 4)
	queue := "crash-" + run
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()

	acks := newCrashAcks()
	st := &crashStats{}
	stop := startCrashLoad([]*crashClient{srv.client}, acks, st, queue, run, 2, 4)

	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for range crashes {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		srv.kill()
		srv.start()
	}
	// The last crash: stop the load with the server dead, so that the
	// file is checked as a crash left it.
	time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
	srv.kill()
	stop()
	crashed := time.Now()

	// Every lease the test gave has run out.
	time.Sleep(time.Until(crashed.Add(crashLease + 100*time.Millisecond)))
	before := checkAcks(t, path, acks, "after the last SIGKILL")

	// Restart and drain: every job that is not completed must be
	// claimable (none stuck claimed), and completing it must leave the
	// acknowledged completions alone.
	srv.start()
	drained := srv.drain(queue)
	acks.checkDrained(t, checkAcks(t, path, acks, "after the drain"))
	acks.mu.Lock()
	defer acks.mu.Unlock()
	t.Logf("crash: %d SIGKILLs under load in %v; %d enqueues acknowledged (%d calls), %d completions acknowledged, "+
		"%d claims, %d stale completions refused, %d fails, %d heartbeats, %d calls without an answer; "+
		"after the last kill %v; %d jobs drained after the restart; none lost, none completed twice",
		crashes, time.Since(started).Round(time.Millisecond), len(acks.enqueued), st.enqueueCalls.Load(), len(acks.completed),
		st.claims.Load(), st.stale.Load(), st.fails.Load(), st.heartbeats.Load(), st.noAnswer.Load(), before, drained)
}
