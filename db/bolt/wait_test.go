package bolt

import (
	"testing"

	"github.com/fenceq/fenceq/db"
)

// A waiter still inside its own claim is never handed a job (it could then
// get more jobs than it asked for); once it sleeps, it is.
func TestOnlyASleepingWaiterIsHandedAJob(t *testing.T) {
	var ws waiters
	w := ws.register(db.ClaimRequest{Queues: []string{"q"}})
	if got := ws.take("q"); got != nil {
		t.Fatal("take() handed a job to a waiter that is still claiming")
	}
	ws.sleep(w)
	if got := ws.take("q"); got != w {
		t.Fatalf("take() = %v, want the sleeping waiter", got)
	}
	if got := ws.take("q"); got != nil {
		t.Fatal("take() returned the same waiter twice")
	}
	if !ws.handedOffPending(w) {
		t.Fatal("a taken waiter is not pending before its commit")
	}
	job := db.Job{ID: 7}
	ws.deliver(w, &job)
	if ws.handedOffPending(w) {
		t.Fatal("a delivered waiter is still pending")
	}
	if got := ws.handedOff(w); got == nil || got.ID != 7 {
		t.Fatalf("handedOff() = %v, want job 7", got)
	}
}
