package bolt

import (
	"fmt"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// A caller alone never waits for the settle time: with SettleTime an hour,
// a sequence of writes by one caller still commits each at once.
func TestALoneCallerNeverWaitsForTheSettleTime(t *testing.T) {
	opts := testOptions(newFakeClock())
	opts.SettleTime = time.Hour
	s := mustOpenStore(t, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			mustEnqueue(t, s, db.EnqueueRequest{Queue: "q", IdempotencyKey: fmt.Sprint(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // one settle would be an hour
		t.Fatal("20 writes by one caller did not finish in a minute: a commit waited for the settle time")
	}
	if c, _ := s.CommitStats(); c < 20 {
		t.Errorf("commits = %d, want one per write (20)", c)
	}
}
