package db

import (
	"cmp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// What the status page shows an operator besides the jobs: the fenced calls
// that were refused (RefusedCall), the workers heard from recently
// (Worker), and how long each queue's oldest available job has waited
// (QueueWaiting). The first two are observations, kept apart from the jobs
// they are about: recording one changes no job, appends no audit link, and
// the store keeps a bounded number of them.

// Bounds on the observations a store keeps.
const (
	// MaxRefusedCalls is how many refused calls a store keeps: recording
	// one more removes the oldest. A caller who sends refused calls on
	// purpose can push older ones out, never grow the store.
	MaxRefusedCalls = 1000
	// MaxWorkersKept is how many workers a store keeps: writing a worker
	// past it removes the ones heard from longest ago.
	MaxWorkersKept = 1000
	// WorkerRetention is how long a worker not heard from is kept.
	WorkerRetention = 24 * time.Hour
	// MaxObservationBatch bounds one RecordRefusedCalls or RecordWorkers
	// call (a batch of fenced calls holds at most this many items).
	MaxObservationBatch = MaxClaimBatch
	// MaxWaitingPriorities bounds the priority levels QueueWaiting looks
	// at in one queue: the highest ones.
	MaxWaitingPriorities = 100

	maxLabelBytes   = 200 // a principal or worker label kept with an observation
	maxRefusalBytes = 1024
)

// RefusedCall is a heartbeat, completion or failure refused because its
// caller no longer held the claim (a worker paused past its lease, or one
// acting on an old claim), as the store keeps it. The refusal changed
// nothing about the job; this record is all that is left of it.
type RefusedCall struct {
	Seq       uint64    // given by the store, increasing; 0 in a request
	At        time.Time // when it was refused; zero in a request: the store's now
	Principal string
	Worker    string
	Job       uint64
	Operation string // "heartbeat", "complete", "fail"
	TokenSent uint64 // the fencing token the call carried (0: none)
	Code      string // the API's code: "not_found", "failed_precondition"
	Message   string
}

// RefusedCallsRequest asks for the newest refused calls, all of them or
// those against one job.
type RefusedCallsRequest struct {
	Job   uint64 // 0: every job
	Limit int    // 0: DefaultListLimit; at most MaxListLimit
}

// WorkerSighting is what an API server heard from one worker since it last
// wrote: claim calls and successful heartbeats. RecordWorkers merges it
// into the worker's record.
type WorkerSighting struct {
	Principal     string
	Worker        string
	Claims        uint64    // jobs claimed since the last sighting written
	LastClaim     time.Time // the last claim call (zero: none)
	LastHeartbeat time.Time // the last accepted heartbeat (zero: none)
}

// Worker is one worker label of one principal, as heard from by every
// server of the store.
type Worker struct {
	Principal     string
	Worker        string
	Claims        uint64 // jobs it claimed, as written so far
	FirstSeen     time.Time
	LastSeen      time.Time // the later of LastClaim and LastHeartbeat
	LastClaim     time.Time
	LastHeartbeat time.Time
}

// WorkersRequest asks for the workers heard from most recently.
type WorkersRequest struct {
	Limit int // 0: DefaultListLimit; at most MaxListLimit
}

// QueueWaiting is the oldest available job of a queue: the job that has
// waited longest for a claim (of those with the same run_at, the lowest
// id), and since when (its run_at: the time it was enqueued, became due,
// or was made available again).
type QueueWaiting struct {
	Queue string
	Job   uint64
	Since time.Time
}

// RetryFilter narrows a list of scheduled jobs (StateListRequest.Retry).
type RetryFilter uint8

// Retry filters: a scheduled job whose attempts are above 0 failed before
// and waits for its next attempt.
const (
	RetryAny  RetryFilter = iota // every scheduled job
	RetryOnly                    // only jobs waiting for a retry
	RetryNone                    // only jobs not yet attempted
)

// Retrying reports whether a scheduled job waits for a retry (it failed
// before) rather than for its first run.
func (j Job) Retrying() bool { return j.State == StateScheduled && j.Attempts > 0 }

// NormalizeRefusedCalls validates a batch of refused calls and bounds each
// field, so that nothing a caller sent can make a record large: labels are
// cut to 200 bytes and messages to 1024, on a rune boundary. Refusals:
// CodeInvalid (an empty batch, an unknown operation), CodeTooLarge (more
// than MaxObservationBatch).
func NormalizeRefusedCalls(calls []RefusedCall) error {
	if len(calls) == 0 {
		return Errorf(CodeInvalid, "no refused calls to record")
	}
	if len(calls) > MaxObservationBatch {
		return Errorf(CodeTooLarge, "too many refused calls in one batch: %d, at most %d", len(calls), MaxObservationBatch)
	}
	for i := range calls {
		c := &calls[i]
		switch c.Operation {
		case "heartbeat", "complete", "fail":
		default:
			return Errorf(CodeInvalid, "refused call %d: unknown operation %q", i, c.Operation)
		}
		c.Seq = 0
		c.Principal, c.Worker = cut(c.Principal, maxLabelBytes), cut(c.Worker, maxLabelBytes)
		c.Code, c.Message = cut(c.Code, maxLabelBytes), cut(c.Message, maxRefusalBytes)
	}
	return nil
}

// NormalizeWorkerSightings validates a batch of sightings and merges those
// of the same worker, in (principal, worker) order: the order every engine
// writes them in. Refusals: CodeInvalid (an empty batch or worker label),
// CodeTooLarge (more than MaxObservationBatch, a label over 200 bytes).
func NormalizeWorkerSightings(ss []WorkerSighting) ([]WorkerSighting, error) {
	if len(ss) == 0 {
		return nil, Errorf(CodeInvalid, "no workers to record")
	}
	if len(ss) > MaxObservationBatch {
		return nil, Errorf(CodeTooLarge, "too many workers in one batch: %d, at most %d", len(ss), MaxObservationBatch)
	}
	byKey := map[[2]string]*WorkerSighting{}
	out := make([]WorkerSighting, 0, len(ss))
	for i, s := range ss {
		if s.Worker == "" {
			return nil, Errorf(CodeInvalid, "worker sighting %d: worker is required", i)
		}
		if len(s.Worker) > maxLabelBytes || len(s.Principal) > maxLabelBytes {
			return nil, Errorf(CodeTooLarge, "worker sighting %d: a label is longer than %d bytes", i, maxLabelBytes)
		}
		if s.LastClaim.IsZero() && s.LastHeartbeat.IsZero() {
			return nil, Errorf(CodeInvalid, "worker sighting %d: neither a claim nor a heartbeat time", i)
		}
		k := [2]string{s.Principal, s.Worker}
		if m := byKey[k]; m != nil {
			m.Claims += s.Claims
			m.LastClaim, m.LastHeartbeat = later(m.LastClaim, s.LastClaim), later(m.LastHeartbeat, s.LastHeartbeat)
			continue
		}
		out = append(out, s)
		byKey[k] = &out[len(out)-1]
	}
	sortSightings(out)
	return out, nil
}

func sortSightings(ss []WorkerSighting) {
	slices.SortFunc(ss, func(a, b WorkerSighting) int {
		return cmp.Or(cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.Worker, b.Worker))
	})
}

// MergeWorker is a worker's record after sighting s: old is nil for a
// worker not kept yet. Claims add up; each last time is the later one,
// the first seen the earliest time heard of.
func MergeWorker(old *Worker, s WorkerSighting) Worker {
	w := Worker{Principal: s.Principal, Worker: s.Worker}
	if old != nil {
		w = *old
	}
	w.Claims += s.Claims
	w.LastClaim, w.LastHeartbeat = later(w.LastClaim, s.LastClaim), later(w.LastHeartbeat, s.LastHeartbeat)
	w.LastSeen = later(w.LastSeen, later(w.LastClaim, w.LastHeartbeat))
	for _, t := range []time.Time{s.LastClaim, s.LastHeartbeat} {
		if !t.IsZero() && (w.FirstSeen.IsZero() || t.Before(w.FirstSeen)) {
			w.FirstSeen = t
		}
	}
	return w
}

// WorkerExpired reports whether a worker last seen at lastSeen is past
// WorkerRetention at now.
func WorkerExpired(lastSeen, now time.Time) bool { return now.Sub(lastSeen) > WorkerRetention }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// cut shortens s to at most n bytes of valid UTF-8.
func cut(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s[:min(n, len(s))], "")
}
