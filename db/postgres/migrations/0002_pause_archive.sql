-- fenceq schema 2: queue pause (a row per paused queue) and the audit
-- checkpoint (the last record archived and removed), kept with the head.

CREATE TABLE fenceq_paused (
    queue     text COLLATE "C" PRIMARY KEY,
    paused_at bigint NOT NULL,
    paused_by bytea NOT NULL
);

ALTER TABLE fenceq_audit_head
    ADD COLUMN cp_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN cp_hash bytea,
    ADD COLUMN cp_time bigint NOT NULL DEFAULT 0,
    ADD COLUMN cp_archived_at bigint NOT NULL DEFAULT 0;
