package bolt

// Bucket names, in one place. Every index entry changes in the same
// transaction as the record it points to (see putJob).
var (
	// bucketJobs: id (8 bytes big-endian) → msgpack jobRecord.
	bucketJobs = []byte("jobs")
	// bucketReady: queue 0x00 ^priority runAt id → nil; available jobs in claim order.
	bucketReady = []byte("idx_ready")
	// bucketScheduled: runAt id → nil; jobs waiting for their run_at.
	bucketScheduled = []byte("idx_scheduled")
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
)

var allBuckets = [][]byte{bucketJobs, bucketReady, bucketScheduled, bucketClaimed, bucketFinished,
	bucketIdempotency, bucketCounts, bucketAudit, bucketMeta, bucketLeases,
	bucketDead, bucketAuditSubject, bucketAuditCounts}

var (
	metaSchemaVersion = []byte("schema_version")
	metaAuditHead     = []byte("audit_head") // seq (8) ‖ hash (32)
)
