package bolt

import bbolt "go.etcd.io/bbolt"

// Bucket names, in one place. Every index entry changes in the same
// transaction as the record it points to (see putJob).
var (
	// bucketJobs: id (8 bytes big-endian) → msgpack jobRecord.
	bucketJobs = []byte("jobs")
	// bucketReady: queue 0x00 ^priority runAt id → nil; available jobs in claim order.
	bucketReady = []byte("idx_ready")
	// bucketScheduled: runAt id → nil; jobs waiting for their run_at.
	bucketScheduled = []byte("idx_scheduled")
	// bucketScheduledQueue: queue 0x00 runAt id → nil; the same jobs, queue
	// by queue, so that a claim promotes its own queues' due jobs first
	// (db.Promotion). Schema version 5.
	bucketScheduledQueue = []byte("idx_scheduled_queue")
	// bucketClaimed: queue 0x00 leaseExpiresAt id → nil; claimed jobs by lease expiry.
	bucketClaimed = []byte("idx_claimed")
	// bucketFinished: finishedAt id → nil; completed and cancelled jobs in
	// the order the retention sweeper deletes them.
	bucketFinished = []byte("idx_finished")
	// bucketIdempotency: queue 0x00 key → id.
	bucketIdempotency = []byte("idx_idempotency")
	// bucketCounts: queue 0x00 state → uint64 count, kept for Stats.
	bucketCounts = []byte("counts")
	// bucketAudit: sequence (8 bytes) → msgpack auditRecord.
	bucketAudit = []byte("audit")
	// bucketMeta: small named values (schema version, audit head).
	bucketMeta = []byte("meta")
	// bucketLeases: lease name (its UTF-8 bytes) → msgpack leaseRecord.
	// Records are never deleted: they keep the last token of the name.
	bucketLeases = []byte("leases")
	// bucketDead: queue 0x00 updatedAt id → nil; dead jobs by queue and the
	// time they died, so the status page lists them without a scan.
	bucketDead = []byte("idx_dead")
	// bucketAuditSubject: subjectKey(subject) 0x00 seq → nil; the audit
	// records of one job or lease, written with each record (appendAudit).
	bucketAuditSubject = []byte("idx_audit_subject")
	// bucketAuditCounts: action name (or an expiry outcome, see
	// auditCountKeys) → uint64; how many audit records of each kind exist.
	bucketAuditCounts = []byte("audit_counts")
	// bucketPaused: queue name → msgpack pauseRecord; the paused queues,
	// which claims skip (pause.go). Schema version 3.
	bucketPaused = []byte("queue_paused")
	// bucketRefused: sequence (8) → msgpack refusedRecord; the newest
	// db.MaxRefusedCalls refused fenced calls (observe.go). Schema version 6.
	bucketRefused = []byte("refused")
	// bucketRefusedJob: job id (8) ‖ sequence (8) → nil; the refused calls
	// of one job.
	bucketRefusedJob = []byte("idx_refused_job")
	// bucketWorkers: workerKey(principal, worker) → msgpack workerRecord;
	// at most db.MaxWorkersKept workers heard from (observe.go). The
	// bucket's sequence is the number of workers it holds.
	bucketWorkers = []byte("workers")
	// bucketWorkersSeen: lastSeen ‖ workerKey → nil; the workers in the
	// order they were last heard from, for listing and pruning.
	bucketWorkersSeen = []byte("idx_workers_seen")
	// bucketSchedules: schedule name → msgpack scheduleRecord; at most
	// db.MaxSchedules (schedules.go). Schema version 7.
	bucketSchedules = []byte("schedules")
	// bucketScheduleNext: next fire time ‖ name → nil; the running
	// schedules by their next tick, so that a pass reads only due ones.
	bucketScheduleNext = []byte("idx_schedule_next")
	// bucketScheduleTicks: name 0x00 scheduled_for → job id (8); one
	// record per tick fired, unique, the newest db.ScheduleTicksKept of
	// each schedule kept.
	bucketScheduleTicks = []byte("schedule_ticks")
)

var allBuckets = [][]byte{bucketJobs, bucketReady, bucketScheduled, bucketClaimed, bucketFinished,
	bucketIdempotency, bucketCounts, bucketAudit, bucketMeta, bucketLeases,
	bucketDead, bucketAuditSubject, bucketAuditCounts, bucketPaused, bucketScheduledQueue,
	bucketRefused, bucketRefusedJob, bucketWorkers, bucketWorkersSeen,
	bucketSchedules, bucketScheduleNext, bucketScheduleTicks}

var (
	metaSchemaVersion = []byte("schema_version")
	metaAuditHead     = []byte("audit_head") // seq (8) ‖ hash (32)
	// metaAuditCheckpoint: the last audit record removed after it was
	// archived: seq (8) ‖ hash (32) ‖ its time (8) ‖ removed at (8), times
	// as Unix nanoseconds. Absent until a first removal (schema version 3).
	metaAuditCheckpoint = []byte("audit_checkpoint")
)

// fillPercents is how full bbolt packs the pages it splits, per bucket
// (bbolt's default, half full, for the others). bbolt does not store it:
// setFill sets it on the bucket handles of every write transaction.
//
// A bucket whose keys only grow is written at its right edge, so the left
// page of a split is never written again and the room a half-full split
// leaves there stays empty for ever: audit (sequences) and idx_finished
// (finish times) are packed full. Job ids only grow too, but a job's
// record grows in place when it is claimed and completed; the tenth left
// free absorbs that growth without a split that would leave half-empty
// pages behind. idx_ready mostly grows at the tail of each queue's range
// (run_at is the enqueue or retry time), with a little room for the jobs
// that arrive in the middle (priorities, a run_at in the past).
// idx_audit_subject is appended at enqueue but also written in the middle
// (a job's later records beside its first). docs/performance.md ("Bytes on
// disk per job") has the measurements these values were chosen from.
var fillPercents = map[string]float64{
	string(bucketJobs):         0.9,
	string(bucketAudit):        1.0,
	string(bucketFinished):     1.0,
	string(bucketReady):        0.95,
	string(bucketAuditSubject): 0.85,
}

// setFill sets the fill of the buckets in fillPercents on tx's handles,
// which tx.Bucket returns again for the rest of the transaction.
func setFill(tx *bbolt.Tx) {
	for name, fill := range fillPercents {
		if b := tx.Bucket([]byte(name)); b != nil {
			b.FillPercent = fill
		}
	}
}
