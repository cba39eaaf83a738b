// Package db is fenceq's storage vocabulary and its queue rules: jobs,
// leases and audit records as callers see them, the request and result
// types, the limits and their validation, the one refusal type (Error),
// the audit chain's canonical encoding and hash, the state transitions as
// pure functions, and the Store interface every engine implements. It
// imports no storage library: engines (db/bolt) do, and db/dbtest holds the
// conformance suite every engine must pass.
package db

import (
	"context"
	"io"
	"time"
)

// Store is a durable job queue with named leases and an audit chain. Every
// mutation runs in one serializable transaction of the engine and is
// answered after it committed; a refused one (an *Error) changed nothing.
// Methods are safe for concurrent use.
type Store interface {
	// Schedules: periodic jobs (schedule.go).
	Schedules

	// EnqueueJob adds one job. Refusals: CodeInvalid, CodeTooLarge.
	EnqueueJob(ctx context.Context, req EnqueueRequest) (EnqueueResult, error)
	// EnqueueJobs adds several jobs in one transaction: all of them or,
	// when any request is invalid, none; the refusal names its index.
	EnqueueJobs(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error)
	// ClaimJobs takes up to req.Max of the best eligible jobs (available,
	// due scheduled, expired claims), long-polling up to req.Wait when none
	// is. No job is an empty slice, not an error.
	ClaimJobs(ctx context.Context, req ClaimRequest) ([]Job, error)
	// HeartbeatJob extends the caller's lease. A caller that does not hold
	// the current claim gets CodeNotFound.
	HeartbeatJob(ctx context.Context, req HeartbeatRequest) (Job, error)
	// CompleteJob completes the caller's claim. A caller that does not hold
	// the current claim gets CodeConflict and leaves nothing behind.
	CompleteJob(ctx context.Context, req CompleteRequest) (Job, error)
	// CompleteAndClaimJob completes the caller's claim and claims up to
	// next.Max jobs in the same transaction.
	CompleteAndClaimJob(ctx context.Context, req CompleteRequest, next ClaimRequest) (Job, []Job, error)
	// FailJob records a failed attempt: retried after a delay, or dead. A
	// caller that does not hold the current claim gets CodeNotFound.
	FailJob(ctx context.Context, req FailRequest) (Job, error)
	// HeartbeatJobs extends several leases in one transaction, each item
	// decided as HeartbeatJob would (see ValidateBatch for a malformed
	// batch, the only error besides faults).
	HeartbeatJobs(ctx context.Context, reqs []HeartbeatRequest) ([]ItemResult, error)
	// CompleteJobs completes several claims in one transaction, each item
	// decided as CompleteJob would, and claims req.Next in it.
	CompleteJobs(ctx context.Context, req CompleteBatchRequest) (CompleteBatchResult, error)
	// FailJobs records several failed attempts in one transaction, each
	// item decided as FailJob would.
	FailJobs(ctx context.Context, reqs []FailRequest) ([]ItemResult, error)
	// CancelJob cancels an unfinished or dead job (CodeConflict otherwise).
	CancelJob(ctx context.Context, req JobRequest) (Job, error)
	// RetryJob makes a dead or cancelled job available (CodeConflict otherwise).
	RetryJob(ctx context.Context, req JobRequest) (Job, error)
	// GetJob returns one job, or CodeNotFound.
	GetJob(ctx context.Context, id uint64) (Job, error)
	// CheckJob answers whether token is the job's current claim
	// (CodeConflict when not).
	CheckJob(ctx context.Context, id, token uint64) (Job, error)
	// ListJobs pages through jobs in id order.
	ListJobs(ctx context.Context, req ListRequest) (JobPage, error)
	// ListJobsInState returns the first jobs of one state in its order
	// (see StateListRequest).
	ListJobsInState(ctx context.Context, req StateListRequest) ([]Job, error)
	// Stats counts jobs per queue and state.
	Stats(ctx context.Context) ([]QueueStats, error)
	// QueueWaiting returns, for every queue with available jobs in name
	// order, its oldest available job: the earliest run_at among the
	// first MaxWaitingPriorities priority levels, read from the claim
	// index (no scan of the queue's jobs).
	QueueWaiting(ctx context.Context) ([]QueueWaiting, error)

	// RecordRefusedCalls keeps calls (see NormalizeRefusedCalls) in one
	// transaction, each with a new Seq and, when At is zero, the store's
	// now, and removes the oldest beyond MaxRefusedCalls. It changes no
	// job. Refusals: CodeInvalid, CodeTooLarge.
	RecordRefusedCalls(ctx context.Context, calls []RefusedCall) error
	// ListRefusedCalls returns the newest refused calls first, of every
	// job or of req.Job. Refusals: CodeInvalid (a bad limit).
	ListRefusedCalls(ctx context.Context, req RefusedCallsRequest) ([]RefusedCall, error)
	// RecordWorkers merges sightings into the workers' records (see
	// NormalizeWorkerSightings and MergeWorker) in one transaction, and
	// removes workers not seen for WorkerRetention and those beyond
	// MaxWorkersKept, heard from longest ago first. It changes no job.
	// Refusals: CodeInvalid, CodeTooLarge.
	RecordWorkers(ctx context.Context, sightings []WorkerSighting) error
	// ListWorkers returns the workers heard from most recently first.
	// Refusals: CodeInvalid (a bad limit).
	ListWorkers(ctx context.Context, req WorkersRequest) ([]Worker, error)

	// SetQueuePaused pauses or resumes a queue (see SetPause). A paused
	// queue takes enqueues but gives no job to a claim: ClaimJobs, a
	// claim over several queues and CompleteAndClaimJob's next claim skip
	// it, and long-polls waiting on it keep waiting until it is resumed,
	// when they are woken; its claimed jobs can still be heartbeaten,
	// completed and failed. The pause is stored (it outlives the process)
	// and audited. Asking for what already is changes nothing and answers
	// Changed false. Refusals: CodeInvalid, CodeTooLarge (MaxPausedQueues).
	SetQueuePaused(ctx context.Context, req PauseRequest) (PauseResult, error)
	// PausedQueues lists the paused queues in name order.
	PausedQueues(ctx context.Context) ([]QueuePause, error)

	// AcquireLease gives the named lease to the caller with a new token, or
	// CodeConflict while another holds it.
	AcquireLease(ctx context.Context, req AcquireLeaseRequest) (Lease, error)
	// RenewLease extends the caller's unexpired lease.
	RenewLease(ctx context.Context, req RenewLeaseRequest) (Lease, error)
	// ReleaseLease frees the caller's lease.
	ReleaseLease(ctx context.Context, req ReleaseLeaseRequest) (Lease, error)
	// CheckLease answers whether token is the lease's current, unexpired token.
	CheckLease(ctx context.Context, name string, token uint64) (Lease, error)
	// GetLease returns the lease, or CodeNotFound.
	GetLease(ctx context.Context, name string) (Lease, error)
	// ListLeases pages through leases in name order.
	ListLeases(ctx context.Context, req ListLeasesRequest) (LeasePage, error)

	// ListAudit returns up to limit links with a sequence above after.
	ListAudit(ctx context.Context, after uint64, limit int) ([]AuditRecord, error)
	// ListAuditBySubject pages backwards through one subject's records.
	ListAuditBySubject(ctx context.Context, req AuditSubjectRequest) (AuditPage, error)
	// RemoveAudit removes up to req.Limit of the oldest stored audit
	// records, through req.Through at most, with their subject index
	// entries, in one transaction that also moves the checkpoint to the
	// last one removed and appends an "archive" record. It returns the
	// checkpoint after the call; a Through at or below the checkpoint
	// removes nothing (a repeated call). Refusals: CodeInvalid when
	// Through is past the head; CodeConflict when Through.Hash is not the
	// stored record's or a record to remove is not older than req.Before.
	RemoveAudit(ctx context.Context, req RemoveAuditRequest) (AuditCheckpoint, error)
	// ArchiveAudit reads an archive's records from one snapshot of the
	// log: it calls start with the checkpoint, then add with each stored
	// record after it, in order, while they are older than req.Before, at
	// most req.Limit of them (0: all). A removal committed meanwhile
	// changes nothing it reads. An error from start or add ends the read
	// and is returned.
	ArchiveAudit(ctx context.Context, req ArchiveAuditRequest, start func(AuditCheckpoint) error, add func(AuditRecord) error) error
	// AuditHead returns the newest link and the checkpoint.
	AuditHead(ctx context.Context) (AuditHead, error)
	// AuditCounts returns the counters kept with the log.
	AuditCounts(ctx context.Context) (AuditCounts, error)
	// VerifyAudit walks the whole stored chain, from the checkpoint (see
	// ChainVerifier).
	VerifyAudit(ctx context.Context) (AuditReport, error)
	// VerifyAuditFrom walks at most req.Limit records after req.From in one
	// read transaction and reports how far the chain verifies
	// (ReportSoFar): one step of an incremental verification, which never
	// walks again what was verified before.
	VerifyAuditFrom(ctx context.Context, req AuditVerifyRequest) (AuditReport, error)

	// SweepOnce deletes up to limit jobs finished at or before now minus
	// retention, in one transaction.
	SweepOnce(ctx context.Context, retention time.Duration, limit int) (int, error)
	// Sweep runs SweepOnce until a pass deletes less than a full batch.
	Sweep(ctx context.Context, retention time.Duration) (int, error)

	// StopWaiting ends every wait, now and later, for a graceful shutdown
	// (the server's SIGTERM): waiting claims return what they have (a job
	// already handed to them, else nothing), waiting lease acquires return
	// their lease-held refusal, as when their waits run out, and later
	// waits return after one attempt. Everything else goes on until Close.
	StopWaiting()

	// Ping reports whether the store can serve a read.
	Ping(ctx context.Context) error
	// Close waits for the commit in progress and closes the store; later
	// calls get ErrClosed.
	Close() error
}

// Backuper is a store that can write a consistent snapshot of itself that
// its engine opens as it is (the bbolt engine: the whole file).
type Backuper interface {
	Backup(ctx context.Context, w io.Writer) (int64, error)
}
