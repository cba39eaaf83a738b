-- fenceq schema 4: what the status page shows besides the jobs, kept in
-- the database so that every replica shows the same and it outlives a
-- restart (db/observe.go): the refused fenced calls (the newest
-- MaxRefusedCalls) and the workers heard from (at most MaxWorkersKept,
-- none older than WorkerRetention). Neither is a job's state: writing them
-- changes no job and appends no audit link. Also an index for the list of
-- jobs waiting for a retry.

CREATE TABLE fenceq_refused (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         bigint NOT NULL,
    principal  bytea NOT NULL,
    worker     bytea NOT NULL,
    job        bigint NOT NULL,
    operation  text NOT NULL,
    token_sent bigint NOT NULL,
    code       text NOT NULL,
    message    bytea NOT NULL
);
CREATE INDEX fenceq_refused_job ON fenceq_refused (job, seq);

CREATE TABLE fenceq_workers (
    principal      bytea NOT NULL,
    worker         bytea NOT NULL,
    claims         bigint NOT NULL,
    first_seen     bigint NOT NULL,
    last_seen      bigint NOT NULL,
    last_claim     bigint NOT NULL,
    last_heartbeat bigint NOT NULL,
    PRIMARY KEY (principal, worker)
);
CREATE INDEX fenceq_workers_seen ON fenceq_workers (last_seen);

CREATE INDEX fenceq_jobs_retrying ON fenceq_jobs (run_at, id) WHERE state = 'scheduled' AND attempts > 0;
