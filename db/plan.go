package db

// Planners: what the engines' background work and bulk steps do, decided
// once here. An engine reads what a plan asks for, executes it and writes
// the result; it does not choose what to promote, sweep, take back or
// remove (docs/ARCHITECTURE.md, "Two engines, one set of rules").

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"time"
)

// PromoteLimit bounds each of the two parts of a claim's promotion of due
// scheduled jobs (PlanPromotion): the claim's own queues, then every
// queue. It keeps the work of one commit bounded whatever the number of
// due jobs.
const PromoteLimit = 1000

// Promotion is what a claim promotes (makes available, Promote) before it
// picks, in this order:
//
//  1. the due scheduled jobs of Queues — run_at at or before DueBy —,
//     oldest (run_at, id) first across them, at most QueueLimit: a claim
//     sees the due jobs of the queues it asks for whatever other queues
//     hold;
//  2. then the due scheduled jobs of any queue, oldest first, at most
//     SweepLimit (0: none). As promoted jobs leave the scheduled jobs,
//     each sweep goes on where the last stopped, so promotion keeps up
//     with any number of due jobs, PromoteLimit a claim.
type Promotion struct {
	DueBy      int64 // Unix nanoseconds
	Queues     []string
	QueueLimit int
	SweepLimit int
}

// PlanPromotion plans the promotion of a claim on queues at now. sweep is
// false for a claim whose commit has swept every queue already (an engine
// that sweeps once a commit).
func PlanPromotion(queues []string, now time.Time, sweep bool) Promotion {
	p := Promotion{DueBy: now.UnixNano(), Queues: queues, QueueLimit: PromoteLimit}
	if sweep {
		p.SweepLimit = PromoteLimit
	}
	return p
}

// Due reports whether a scheduled job with runAt (Unix nanoseconds) is due.
func (p Promotion) Due(runAt int64) bool { return runAt <= p.DueBy }

// PromotesBefore is the order in which due jobs are promoted: the earlier
// run_at first, then the lower id.
func PromotesBefore(a, b *JobRecord) bool {
	return cmp.Or(cmp.Compare(a.RunAt, b.RunAt), cmp.Compare(a.ID, b.ID)) < 0
}

// TakesBackBefore is the order in which a queue's expired claims are taken
// back (claimed again, or killed when they have no attempts left): the
// lease that expired first, then the lower id. A claim compares the first
// of them with the queue's best available job by ClaimsBefore.
func TakesBackBefore(a, b *JobRecord) bool {
	return cmp.Or(cmp.Compare(a.LeaseExpiresAt, b.LeaseExpiresAt), cmp.Compare(a.ID, b.ID)) < 0
}

// SweptStates are the states of the jobs a sweep removes: finished jobs.
// Dead jobs are kept for an operator to look at (and retry or cancel).
var SweptStates = []State{StateCompleted, StateCancelled}

// Sweep is what one sweep transaction removes: up to Limit jobs in
// SweptStates whose UpdatedAt — the time they finished, as no change
// follows a job's completion or cancellation — is at or before
// FinishedBy, oldest (UpdatedAt, id) first.
type Sweep struct {
	FinishedBy int64 // Unix nanoseconds
	Limit      int
	Retention  time.Duration
}

// PlanSweep plans one sweep transaction at now: jobs finished at least
// retention ago, at most limit of them (0 or less: DefaultSweepBatch). It
// refuses a negative retention with CodeInvalid.
func PlanSweep(retention time.Duration, limit int, now time.Time) (Sweep, error) {
	if retention < 0 {
		return Sweep{}, Errorf(CodeInvalid, "retention must not be negative")
	}
	if limit <= 0 {
		limit = DefaultSweepBatch
	}
	return Sweep{FinishedBy: now.Add(-retention).UnixNano(), Limit: limit, Retention: retention}, nil
}

// CheckSweepArgs refuses what PlanSweep refuses, for an engine that plans
// inside its transaction (where the clock is read) but must refuse before.
func CheckSweepArgs(retention time.Duration) error {
	_, err := PlanSweep(retention, 0, time.Time{})
	return err
}

// Sweeps reports whether the plan removes rec (its limit aside).
func (p Sweep) Sweeps(rec *JobRecord) bool {
	return (rec.State == StateCompleted || rec.State == StateCancelled) && rec.UpdatedAt <= p.FinishedBy
}

// Event is the audit record of a sweep that removed ids (ascending, at
// least one).
func (p Sweep) Event(ids []uint64) AuditEvent { return SweepEvent(ids, p.Retention) }

// AuditRemoval is the plan of one RemoveAudit call, made from the
// request, the stored checkpoint and the head. The engine then feeds it
// the stored link at Through (CheckThrough) and every stored link from
// the checkpoint's next through End, in order (Add), and calls Finish:
// each refuses with the request's refusal, before anything is written.
// Then the engine deletes Removed, moves the checkpoint to Last and
// appends Event.
type AuditRemoval struct {
	req     RemoveAuditRequest
	cp      AuditCheckpoint
	done    bool
	end     uint64
	v       ChainVerifier
	removed []RemovedAuditLink
	last    AuditLink
}

// RemovedAuditLink is a record a removal deletes: its sequence and subject
// (for the subject index).
type RemovedAuditLink struct {
	Seq     uint64
	Subject string
}

// PlanAuditRemoval plans a removal request (normalized) against the
// stored checkpoint and the head's sequence. It refuses a Through past
// the head with CodeInvalid.
func PlanAuditRemoval(req RemoveAuditRequest, cp AuditCheckpoint, head uint64) (*AuditRemoval, error) {
	p := &AuditRemoval{req: req, cp: cp}
	if req.Through.Seq <= cp.Seq {
		p.done = true // archived and removed before: a repeated call
		return p, nil
	}
	if req.Through.Seq > head {
		return nil, Errorf(CodeInvalid, "audit record %d does not exist (the head is %d)", req.Through.Seq, head)
	}
	p.end = min(req.Through.Seq, cp.Seq+uint64(req.Limit))
	p.v.Start(cp.Mark())
	return p, nil
}

// Done reports that there is nothing to remove: Through is at or before
// the checkpoint (a repeated call). The engine answers the checkpoint.
func (p *AuditRemoval) Done() bool { return p.done }

// After and End bound the stored links to feed to Add: those with a
// sequence above After and at most End.
func (p *AuditRemoval) After() uint64 { return p.cp.Seq }

// End is the last sequence this call removes.
func (p *AuditRemoval) End() uint64 { return p.end }

// CheckThrough checks the stored link at Through: it must have the hash
// the archive holds (CodeConflict otherwise).
func (p *AuditRemoval) CheckThrough(stored []byte) error {
	last, err := DecodeAuditLink(stored)
	if err != nil {
		return err
	}
	if !bytes.Equal(last.Hash, p.req.Through.Hash) {
		return Errorf(CodeConflict, "audit record %d does not have the hash the archive holds", p.req.Through.Seq)
	}
	return nil
}

// Add takes the next stored link (seq, its stored bytes): it must verify
// from the checkpoint and be older than the cut (CodeConflict otherwise).
func (p *AuditRemoval) Add(seq uint64, stored []byte) error {
	if !p.v.Add(seq, stored) {
		rep := p.v.ReportSoFar(0, nil)
		return Errorf(CodeConflict, "the audit chain does not verify (%s): nothing is removed; run fenceq audit verify", rep.Reason)
	}
	l, err := DecodeAuditLink(stored)
	if err != nil {
		return err
	}
	if p.req.Before.IsZero() || l.Time >= p.req.Before.UnixNano() {
		return Errorf(CodeConflict, "audit record %d (%s) is not older than the cut %s", l.Seq,
			FromUnixNano(l.Time).Format(time.RFC3339Nano), p.req.Before.UTC().Format(time.RFC3339Nano))
	}
	p.removed = append(p.removed, RemovedAuditLink{l.Seq, l.Subject})
	p.last = l
	return nil
}

// Finish checks that every link through End was added (CodeConflict
// otherwise: a record is missing).
func (p *AuditRemoval) Finish() error {
	if len(p.removed) == 0 || p.removed[len(p.removed)-1].Seq != p.end {
		return Errorf(CodeConflict, "audit record %d is missing: nothing is removed; run fenceq audit verify", p.end)
	}
	return nil
}

// Removed are the records to delete, in order.
func (p *AuditRemoval) Removed() []RemovedAuditLink { return p.removed }

// Last is the last record removed: the new checkpoint's sequence, hash
// and time.
func (p *AuditRemoval) Last() AuditLink { return p.last }

// Checkpoint is the checkpoint the removal leaves, removed at now.
func (p *AuditRemoval) Checkpoint(now time.Time) AuditCheckpoint {
	return AuditCheckpoint{Seq: p.last.Seq, Hash: hex.EncodeToString(p.last.Hash), Time: FromUnixNano(p.last.Time), ArchivedAt: FromUnixNano(now.UnixNano())}
}

// Event is the audit record of the removal.
func (p *AuditRemoval) Event() AuditEvent {
	return RemoveAuditEvent(p.req.Principal, p.removed[0].Seq, p.last.Seq, p.last.Hash)
}

// StoredKind is a kind of state every engine stores, which a copy from one
// engine to another ("fenceq copy") must carry.
type StoredKind string

// The stored kinds. Indexes and counters derived from them are not kinds
// of their own: an engine rebuilds them from what it stores.
const (
	StoredJobs        StoredKind = "jobs"          // job records, with their idempotency keys
	StoredJobSequence StoredKind = "job sequence"  // the last job id issued, so that no id is issued twice
	StoredLeases      StoredKind = "leases"        // named leases and their tokens
	StoredPauses      StoredKind = "pauses"        // paused queues
	StoredAudit       StoredKind = "audit"         // the chain's links, head and checkpoint
	StoredRefused     StoredKind = "refused calls" // the refused fenced calls the status page lists (observe.go)
	StoredWorkers     StoredKind = "workers"       // the workers heard from (observe.go)
	StoredSchedules   StoredKind = "schedules"     // schedules, their tick records and counters (schedule.go)
)

// StoredKinds lists every stored kind, in the order a copy carries them.
// A kind an engine starts to store is added here; the engines' tests then
// fail until each maps its storage to it and the copy carries it.
var StoredKinds = []StoredKind{StoredJobs, StoredJobSequence, StoredLeases, StoredPauses, StoredAudit, StoredRefused, StoredWorkers, StoredSchedules}

// SweepPasses runs sweep transactions (once, an engine's SweepOnce) of
// DefaultSweepBatch jobs until one removes fewer, and returns how many
// they removed in all.
func SweepPasses(ctx context.Context, retention time.Duration, once func(ctx context.Context, retention time.Duration, limit int) (int, error)) (int, error) {
	total := 0
	for {
		n, err := once(ctx, retention, DefaultSweepBatch)
		total += n
		if err != nil || n < DefaultSweepBatch {
			return total, err
		}
	}
}
