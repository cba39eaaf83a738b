-- fenceq schema 3: the head row is locked at a batch's end, not its start,
-- so that replicas' row work overlaps and only the chain's append takes
-- turns. Job ids therefore come from a sequence (unique and increasing per
-- replica, not dense: a rolled-back batch leaves a gap), and the head keeps
-- the time of the newest link so that a batch whose time was read before
-- another's commit still appends links whose times do not step back.
-- A chain written before this migration was written under the head lock
-- at the database's clock, so every later batch's time is past it and
-- last_time may start at 0.

CREATE SEQUENCE fenceq_job_id AS bigint MINVALUE 1;
SELECT setval('fenceq_job_id', (SELECT next_job_id FROM fenceq_audit_head WHERE id = 1), false);

ALTER TABLE fenceq_audit_head
    DROP COLUMN next_job_id,
    ADD COLUMN last_time bigint NOT NULL DEFAULT 0;

-- The audit counters in shards, as the job counters are: a batch writes
-- them before it takes the head, so they are not part of the head's turn,
-- and replicas do not queue on one row per action.
ALTER TABLE fenceq_audit_counts ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE fenceq_audit_counts DROP CONSTRAINT fenceq_audit_counts_pkey;
ALTER TABLE fenceq_audit_counts ADD PRIMARY KEY (key, shard);
