package namewait

import "testing"

// A wake of one name closes only its subscribers' channel; a later
// subscription waits for the next wake; unsubscribing forgets the count.
func TestWakeClosesOnlyThatNamesWaits(t *testing.T) {
	var w Waiters
	a, doneA := w.Subscribe("a")
	b, doneB := w.Subscribe("b")
	if w.Count("a") != 1 || w.Count("b") != 1 {
		t.Fatalf("Count = %d, %d; want 1, 1", w.Count("a"), w.Count("b"))
	}
	w.Wake("a")
	select {
	case <-a:
	default:
		t.Fatal("Wake(a) did not close a's channel")
	}
	select {
	case <-b:
		t.Fatal("Wake(a) closed b's channel")
	default:
	}
	a2, doneA2 := w.Subscribe("a")
	select {
	case <-a2:
		t.Fatal("a subscription after the wake is already closed")
	default:
	}
	doneA()
	doneA2()
	if n := w.Count("a"); n != 0 {
		t.Errorf("Count(a) after both unsubscribed = %d, want 0", n)
	}
	w.WakeAll()
	select {
	case <-b:
	default:
		t.Fatal("WakeAll did not close b's channel")
	}
	doneB()
}
