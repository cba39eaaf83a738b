-- fenceq schema 6: schedules (periodic jobs, docs/schedules.md). A row of
-- fenceq_schedules per schedule: its normalized spec and job template as
-- columns (as fenceq_jobs keeps a job: an operator reads them with psql,
-- and a field added later is one more column with a default, which
-- replicas that name their columns ignore), its next tick (NULL while
-- paused), its last job and counters. A tick is decided once across
-- replicas by fenceq_schedule_ticks' primary key (schedule,
-- scheduled_for), written in the transaction that enqueues the tick's
-- job. Jobs a schedule enqueued carry schedule, scheduled_for and
-- backfilled.
-- Expand-only: two new tables, and on fenceq_jobs two nullable columns
-- and one with a default, which a replica of an earlier release (which
-- names the columns it reads and writes) neither reads nor writes. It does
-- not tick; it may claim, complete and list a schedule's jobs. The
-- minimum writer version is not raised.

CREATE TABLE fenceq_schedules (
    name               text COLLATE "C" PRIMARY KEY,
    cron               text NOT NULL,   -- '' for an every schedule
    every_ns           bigint NOT NULL, -- 0 for a cron schedule
    start_at           bigint NOT NULL, -- Unix ns; every only
    timezone           text NOT NULL,
    catchup            text NOT NULL,
    catchup_window     bigint NOT NULL, -- ns
    overlap            text NOT NULL,
    jitter             bigint NOT NULL, -- ns
    queue              text COLLATE "C" NOT NULL,
    kind               bytea NOT NULL,
    payload            bytea,
    priority           bigint NOT NULL,
    max_attempts       bigint NOT NULL,
    next_fire          bigint,          -- Unix ns of the next tick; NULL while paused
    last_job           bigint NOT NULL DEFAULT 0,
    last_scheduled_for bigint NOT NULL DEFAULT 0,
    missed_ticks       bigint NOT NULL DEFAULT 0,
    skipped_ticks      bigint NOT NULL DEFAULT 0,
    created_at         bigint NOT NULL,
    updated_at         bigint NOT NULL,
    created_by         bytea NOT NULL,
    paused_at          bigint NOT NULL DEFAULT 0, -- 0: running
    paused_by          bytea NOT NULL DEFAULT ''
);
-- A pass reads the due schedules only: its cost does not grow with the
-- schedules that are not due, nor with the paused ones.
CREATE INDEX fenceq_schedules_due ON fenceq_schedules (next_fire, name) WHERE next_fire IS NOT NULL;

CREATE TABLE fenceq_schedule_ticks (
    schedule      text COLLATE "C" NOT NULL,
    scheduled_for bigint NOT NULL, -- the tick, Unix ns
    job_id        bigint NOT NULL,
    PRIMARY KEY (schedule, scheduled_for)
);

ALTER TABLE fenceq_jobs
    ADD COLUMN schedule text COLLATE "C",
    ADD COLUMN scheduled_for bigint,
    ADD COLUMN backfilled boolean NOT NULL DEFAULT false;
