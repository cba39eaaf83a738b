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
