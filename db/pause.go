package db

import (
	"time"
)

// MaxPausedQueues bounds how many queues may be paused at once, so that
// the paused set every claim consults, the replies that list it and the
// metrics series that report it stay small. Pausing one more is refused
// with CodeTooLarge.
const MaxPausedQueues = 1000

// PauseRequest pauses a queue (Paused true) or resumes it (Paused false).
type PauseRequest struct {
	Principal string
	Queue     string
	Paused    bool
}

// QueuePause is a paused queue: since when and by whom.
type QueuePause struct {
	Queue    string
	PausedAt time.Time
	PausedBy string // the principal that paused it
}

// PauseResult is a queue after SetQueuePaused. Changed is false when the
// queue already was as asked: then nothing was written or audited, and
// PausedAt and PausedBy are those of the pause in force.
type PauseResult struct {
	Queue    string
	Paused   bool
	PausedAt time.Time // zero when not paused
	PausedBy string
	Changed  bool
}

// PauseRecord is a queue's pause as the rules see it; a queue without one
// is not paused. The tags are the bbolt engine's stored names, never
// reused; other engines ignore them.
type PauseRecord struct {
	PausedAt int64  `msgpack:"pa"`
	PausedBy string `msgpack:"pb,omitempty"`
}

// QueueSubject is the audit subject of a queue's pause and resume
// ("queue:<name>").
func QueueSubject(queue string) string { return "queue:" + queue }

// SetPause is the pause or resume of req.Queue, whose current pause is old
// (nil: not paused) while paused queues are paused in all. It returns the
// record to store (nil: none, the queue runs) and, when the queue changes,
// the audit event; a request that asks for what already is changes nothing
// (changed false) and is not a refusal. Pausing a queue beyond
// MaxPausedQueues is refused with CodeTooLarge; a bad queue name with
// CodeInvalid.
func SetPause(old *PauseRecord, paused int, req PauseRequest, now time.Time) (next *PauseRecord, changed bool, ev AuditEvent, err error) {
	if err := ValidateQueue(req.Queue); err != nil {
		return nil, false, AuditEvent{}, err
	}
	switch {
	case req.Paused && old != nil, !req.Paused && old == nil:
		return old, false, AuditEvent{}, nil
	case req.Paused && paused >= MaxPausedQueues:
		return nil, false, AuditEvent{}, Errorf(CodeTooLarge, "too many paused queues: %d are paused, the limit is %d; resume one first", paused, MaxPausedQueues)
	case req.Paused:
		next = &PauseRecord{PausedAt: now.UnixNano(), PausedBy: req.Principal}
		return next, true, AuditEvent{Principal: req.Principal, Action: "pause", Subject: QueueSubject(req.Queue),
			Details: map[string]string{"queue": req.Queue}}, nil
	default:
		return nil, true, AuditEvent{Principal: req.Principal, Action: "resume", Subject: QueueSubject(req.Queue),
			Details: map[string]string{"queue": req.Queue, "paused_at": FromUnixNano(old.PausedAt).Format(time.RFC3339Nano), "paused_by": old.PausedBy}}, nil
	}
}

// Result is the queue as the request left it.
func (r *PauseRecord) Result(queue string, changed bool) PauseResult {
	if r == nil {
		return PauseResult{Queue: queue, Changed: changed}
	}
	return PauseResult{Queue: queue, Paused: true, PausedAt: FromUnixNano(r.PausedAt), PausedBy: r.PausedBy, Changed: changed}
}

// Pause is the record as callers see it.
func (r *PauseRecord) Pause(queue string) QueuePause {
	return QueuePause{Queue: queue, PausedAt: FromUnixNano(r.PausedAt), PausedBy: r.PausedBy}
}
