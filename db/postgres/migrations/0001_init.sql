-- fenceq schema 1: jobs, named leases, the audit chain and the counters
-- kept beside them. Times are Unix nanoseconds (0 = unset), as in every
-- engine; free text the rules store byte for byte is bytea. Queue and
-- lease names use the "C" collation so that they sort bytewise, as bbolt's
-- keys do.

CREATE TABLE fenceq_jobs (
    id               bigint PRIMARY KEY, -- from fenceq_audit_head.next_job_id
    queue            text COLLATE "C" NOT NULL,
    kind             bytea NOT NULL,
    payload          bytea,
    priority         bigint NOT NULL,
    state            text NOT NULL,
    attempts         bigint NOT NULL,
    max_attempts     bigint NOT NULL,
    budget           bigint NOT NULL,
    claimed_by       bytea NOT NULL,
    lease_expires_at bigint NOT NULL,
    run_at           bigint NOT NULL,
    created_at       bigint NOT NULL,
    updated_at       bigint NOT NULL,
    completed_at     bigint NOT NULL,
    last_error       bytea NOT NULL,
    errors           bytea,
    result           bytea,
    attestation      bytea,
    idempotency_key  bytea
);

-- One index per state order, partial, so that each is as small as its state.
CREATE UNIQUE INDEX fenceq_jobs_idempotency ON fenceq_jobs (queue, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX fenceq_jobs_ready     ON fenceq_jobs (queue, priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX fenceq_jobs_scheduled ON fenceq_jobs (run_at, id) WHERE state = 'scheduled';
CREATE INDEX fenceq_jobs_scheduled_queue ON fenceq_jobs (queue, run_at) WHERE state = 'scheduled';
CREATE INDEX fenceq_jobs_claimed   ON fenceq_jobs (queue, lease_expires_at, id) WHERE state = 'claimed';
CREATE INDEX fenceq_jobs_finished  ON fenceq_jobs (updated_at, id) WHERE state IN ('completed', 'cancelled');
CREATE INDEX fenceq_jobs_dead      ON fenceq_jobs (queue, updated_at, id) WHERE state = 'dead';

-- Job counts per queue and state, in shards: a transaction adds its deltas
-- to one shard, so replicas do not queue on one row per state; Stats sums.
CREATE TABLE fenceq_job_counts (
    queue text COLLATE "C" NOT NULL,
    state text NOT NULL,
    shard smallint NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (queue, state, shard)
);

CREATE TABLE fenceq_leases (
    name        text COLLATE "C" PRIMARY KEY,
    holder      bytea NOT NULL,
    token       bigint NOT NULL,
    expires_at  bigint NOT NULL,
    acquired_at bigint NOT NULL,
    updated_at  bigint NOT NULL
);

-- The audit chain: each link as the bytes every engine stores (db.AuditLink
-- sealed), its subject for the history index.
CREATE TABLE fenceq_audit (
    seq     bigint PRIMARY KEY,
    subject text COLLATE "C" NOT NULL,
    link    bytea NOT NULL
);
CREATE INDEX fenceq_audit_subject ON fenceq_audit (subject, seq);

-- The chain's head: one row, locked first by every batch of every replica,
-- which orders the batches. It also holds the next job id, so that ids
-- are given in that order without gaps (a sequence would leave one for
-- each rolled-back insert).
CREATE TABLE fenceq_audit_head (
    id          smallint PRIMARY KEY CHECK (id = 1),
    seq         bigint NOT NULL,
    hash        bytea,
    next_job_id bigint NOT NULL
);
INSERT INTO fenceq_audit_head (id, seq, hash, next_job_id) VALUES (1, 0, NULL, 1);

CREATE TABLE fenceq_audit_counts (
    key text COLLATE "C" PRIMARY KEY,
    n   bigint NOT NULL
);
