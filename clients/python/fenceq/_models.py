"""Types of the fenceq HTTP API, generated from api/openapi.json.

Do not edit: run `go run ./internal/sdkgen` from the repository root.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

__all__ = [
    "AcquireLeaseRequest",
    "AuditCheckpoint",
    "AuditList",
    "AuditRecord",
    "AuditReport",
    "AuditStatus",
    "AuditVerified",
    "BatchCompleteRequest",
    "BatchCompleteRequestJobsItem",
    "BatchFailRequest",
    "BatchFailRequestJobsItem",
    "BatchHeartbeatRequest",
    "BatchHeartbeatRequestJobsItem",
    "BatchResult",
    "BatchResultResultsItem",
    "CheckRequest",
    "ClaimNext",
    "ClaimRequest",
    "CompleteRequest",
    "CompletedJob",
    "EnqueueRequest",
    "Error",
    "ErrorBody",
    "ErrorCode",
    "FailRequest",
    "FencingToken",
    "Health",
    "HealthStatus",
    "HeartbeatRequest",
    "ItemError",
    "Job",
    "JobCheck",
    "JobError",
    "JobList",
    "JobState",
    "Lease",
    "LeaseCheck",
    "LeaseList",
    "Permissions",
    "QueueCounts",
    "QueueList",
    "QueueName",
    "QueuePause",
    "ReleaseLeaseRequest",
    "RemoveAuditReply",
    "RemoveAuditRequest",
    "RenewLeaseRequest",
    "RequiredFencingToken",
    "Role",
    "Schedule",
    "ScheduleCatchup",
    "ScheduleJob",
    "ScheduleLastJob",
    "ScheduleList",
    "ScheduleOverlap",
    "ScheduleRequest",
    "ScheduleRequestCatchup",
    "ScheduleRequestOverlap",
    "StateCounts",
    "Stats",
    "StatsRefusalsItem",
    "Status",
    "StatusJobList",
    "ThroughputBucket",
    "Whoami",
    "Worker",
    "Zombie",
    "ZombieList",
    "ZombieOperation",
    "OPERATIONS",
]


ErrorCode = Literal["invalid_argument", "unauthenticated", "permission_denied", "not_found", "failed_precondition", "resource_exhausted", "cancelled", "internal", "unavailable"]


FencingToken = int


HealthStatus = Literal["ok", "ready"]


JobState = Literal["available", "scheduled", "claimed", "completed", "dead", "cancelled"]


QueueName = str


RequiredFencingToken = int


Role = Literal["producer", "worker", "admin"]


ScheduleCatchup = Literal["none", "latest", "all"]


ScheduleOverlap = Literal["allow", "skip"]


ScheduleRequestCatchup = Literal["none", "latest", "all"]


ScheduleRequestOverlap = Literal["allow", "skip"]


ZombieOperation = Literal["heartbeat", "complete", "fail"]


class AcquireLeaseRequest(TypedDict, total=False):
    holder: Required[str]
    ttl_ms: NotRequired[int]
    wait_ms: NotRequired[int]


class AuditCheckpoint(TypedDict, total=False):
    archived_at: NotRequired[str]
    hash: NotRequired[str]
    seq: Required[int]
    time: NotRequired[str]


class AuditList(TypedDict, total=False):
    archived: NotRequired[AuditCheckpoint]
    next: NotRequired[int]
    records: Required[list[AuditRecord]]


class AuditRecord(TypedDict, total=False):
    action: Required[str]
    details: NotRequired[dict[str, Any]]
    hash: Required[str]
    prev_hash: Required[str]
    principal: Required[str]
    seq: Required[int]
    subject: Required[str]
    time: Required[str]
    token: Required[int]


class AuditReport(TypedDict, total=False):
    first_broken: NotRequired[int]
    head_hash: Required[str]
    head_seq: Required[int]
    ok: Required[bool]
    reason: NotRequired[str]
    records: Required[int]
    start_hash: NotRequired[str]
    start_seq: NotRequired[int]
    verified_seq: NotRequired[int]


class AuditStatus(TypedDict, total=False):
    head_hash: Required[str]
    head_seq: Required[int]
    verified: Required[AuditVerified | None]


class AuditVerified(AuditReport, total=False):
    "The status page's incremental verification: records is how many it verified since the server started; each poll verifies only what was appended since the last"

    catching_up: NotRequired[bool]
    checked_at: Required[str]


class BatchCompleteRequest(TypedDict, total=False):
    "Completions of several claims; claim_next claims more in the same transaction (answered as next_jobs, max 0 or absent meaning 1)"

    claim_next: NotRequired[ClaimNext]
    jobs: Required[list[BatchCompleteRequestJobsItem]]
    worker: NotRequired[str]


class BatchCompleteRequestJobsItem(TypedDict, total=False):
    attestation: NotRequired[Any]
    fencing_token: NotRequired[FencingToken]
    id: Required[int]
    result: NotRequired[Any]
    worker: NotRequired[str]


class BatchFailRequest(TypedDict, total=False):
    "Failures of several claims"

    jobs: Required[list[BatchFailRequestJobsItem]]
    worker: NotRequired[str]


class BatchFailRequestJobsItem(TypedDict, total=False):
    error: NotRequired[str]
    fencing_token: NotRequired[FencingToken]
    final: NotRequired[bool]
    id: Required[int]
    retry_delay_ms: NotRequired[int | None]
    worker: NotRequired[str]


class BatchHeartbeatRequest(TypedDict, total=False):
    "Heartbeats of several claims"

    jobs: Required[list[BatchHeartbeatRequestJobsItem]]
    worker: NotRequired[str]


class BatchHeartbeatRequestJobsItem(TypedDict, total=False):
    fencing_token: NotRequired[FencingToken]
    id: Required[int]
    lease_ms: NotRequired[int]
    worker: NotRequired[str]


class BatchResult(TypedDict, total=False):
    next_jobs: NotRequired[list[Job]]
    results: Required[list[BatchResultResultsItem]]


class BatchResultResultsItem(TypedDict, total=False):
    "job: the job as written; or error: the refusal the single call would have answered (code and message), and nothing of the item was written"

    error: NotRequired[ItemError]
    id: Required[int]
    job: NotRequired[Job]


class CheckRequest(TypedDict, total=False):
    fencing_token: Required[RequiredFencingToken]


class ClaimNext(TypedDict, total=False):
    "Claim the next job in the same transaction as the completion"

    lease_ms: NotRequired[int]
    max: NotRequired[int]
    queues: NotRequired[list[QueueName]]
    worker: NotRequired[str]


class ClaimRequest(TypedDict, total=False):
    lease_ms: NotRequired[int]
    max: NotRequired[int]
    queue: NotRequired[QueueName]
    queues: NotRequired[list[QueueName]]
    wait_ms: NotRequired[int]
    worker: Required[str]


class CompleteRequest(TypedDict, total=False):
    attestation: NotRequired[Any]
    claim_next: NotRequired[ClaimNext]
    fencing_token: NotRequired[FencingToken]
    result: NotRequired[Any]
    worker: Required[str]


class EnqueueRequest(TypedDict, total=False):
    "One job"

    delay_ms: NotRequired[int]
    idempotency_key: NotRequired[str]
    kind: NotRequired[str]
    max_attempts: NotRequired[int]
    payload: NotRequired[Any]
    priority: NotRequired[int]
    queue: NotRequired[QueueName]
    run_at: NotRequired[str]


class Error(TypedDict, total=False):
    "Every error reply: {\"error\":{\"code\":…,\"message\":…}}"

    error: Required[ErrorBody]


class ErrorBody(TypedDict, total=False):
    "The error of an Error reply"

    code: Required[ErrorCode]
    message: Required[str]


class FailRequest(TypedDict, total=False):
    error: NotRequired[str]
    fencing_token: NotRequired[FencingToken]
    final: NotRequired[bool]
    retry_delay_ms: NotRequired[int | None]
    worker: Required[str]


class Health(TypedDict, total=False):
    status: Required[HealthStatus]


class HeartbeatRequest(TypedDict, total=False):
    fencing_token: NotRequired[FencingToken]
    lease_ms: NotRequired[int]
    worker: Required[str]


class ItemError(TypedDict, total=False):
    "An item's refusal: what the single call would have answered as its error"

    code: Required[ErrorCode]
    message: Required[str]


class Job(TypedDict, total=False):
    "A job"

    attempts: Required[int]
    attestation: NotRequired[Any]
    backfilled: NotRequired[bool]
    claimed_by: NotRequired[str]
    completed_at: NotRequired[str]
    created_at: Required[str]
    errors: NotRequired[list[JobError]]
    fencing_token: NotRequired[int]
    id: Required[int]
    idempotency_key: NotRequired[str]
    kind: NotRequired[str]
    last_error: NotRequired[str]
    lease_expires_at: NotRequired[str]
    max_attempts: Required[int]
    payload: Required[Any]
    priority: Required[int]
    queue: Required[QueueName]
    result: NotRequired[Any]
    run_at: Required[str]
    schedule: NotRequired[str]
    scheduled_for: NotRequired[str]
    state: Required[JobState]
    updated_at: Required[str]


class JobCheck(TypedDict, total=False):
    "The token is the job's current claim (an expired lease that nobody re-claimed still is)"

    current: Required[Literal[True]]
    fencing_token: Required[int]
    id: Required[int]
    lease_expires_at: NotRequired[str]


class JobError(TypedDict, total=False):
    at: Required[str]
    attempt: Required[int]
    error: Required[str]


class JobList(TypedDict, total=False):
    jobs: Required[list[Job]]
    next: NotRequired[int]


class Lease(TypedDict, total=False):
    acquired_at: NotRequired[str]
    expires_at: NotRequired[str]
    fencing_token: Required[int]
    held: Required[bool]
    holder: NotRequired[str]
    name: Required[str]
    updated_at: Required[str]


class LeaseCheck(TypedDict, total=False):
    "The token is the lease's current, unexpired one"

    current: Required[Literal[True]]
    expires_at: NotRequired[str]
    fencing_token: Required[int]
    name: Required[str]


class LeaseList(TypedDict, total=False):
    leases: Required[list[Lease]]
    next: NotRequired[str]


class Permissions(TypedDict, total=False):
    "What the caller's roles allow, by the server's role table"

    audit: Required[bool]
    cancel: Required[bool]
    enqueue: Required[bool]
    jobs: Required[bool]
    leases: Required[bool]
    pause: Required[bool]
    retry: Required[bool]
    schedules: Required[bool]


class QueueCounts(TypedDict, total=False):
    counts: Required[StateCounts]
    latency_ms: NotRequired[int]
    oldest_available_at: NotRequired[str]
    oldest_job: NotRequired[int]
    paused: Required[bool]
    paused_at: NotRequired[str]
    paused_by: NotRequired[str]
    queue: Required[QueueName]


class QueueList(TypedDict, total=False):
    queues: Required[list[QueueCounts]]


class QueuePause(TypedDict, total=False):
    "A queue after a pause or resume"

    changed: Required[bool]
    paused: Required[bool]
    paused_at: NotRequired[str]
    paused_by: NotRequired[str]
    queue: Required[QueueName]


class ReleaseLeaseRequest(TypedDict, total=False):
    fencing_token: Required[RequiredFencingToken]
    holder: Required[str]


class RemoveAuditReply(TypedDict, total=False):
    checkpoint: Required[AuditCheckpoint]
    done: Required[bool]


class RemoveAuditRequest(TypedDict, total=False):
    through_hash: Required[str]
    through_seq: Required[int]


class RenewLeaseRequest(TypedDict, total=False):
    fencing_token: Required[RequiredFencingToken]
    holder: Required[str]
    ttl_ms: NotRequired[int]


class Schedule(TypedDict, total=False):
    catchup: Required[ScheduleCatchup]
    catchup_window_ms: NotRequired[int]
    created_at: Required[str]
    created_by: NotRequired[str]
    cron: NotRequired[str]
    every_ms: NotRequired[int]
    jitter_ms: NotRequired[int]
    job: Required[ScheduleJob]
    last_job: NotRequired[ScheduleLastJob]
    missed_ticks: Required[int]
    name: Required[str]
    next_fire_at: NotRequired[str]
    next_fires: Required[list[str]]
    overlap: Required[ScheduleOverlap]
    paused: Required[bool]
    paused_at: NotRequired[str]
    paused_by: NotRequired[str]
    skipped_ticks: Required[int]
    start_at: NotRequired[str]
    timezone: Required[str]
    updated_at: Required[str]


class ScheduleJob(TypedDict, total=False):
    "The job each tick enqueues"

    kind: NotRequired[str]
    max_attempts: NotRequired[int]
    payload: NotRequired[Any]
    priority: NotRequired[int]
    queue: NotRequired[str]


class ScheduleLastJob(TypedDict, total=False):
    "The last job the schedule enqueued; absent before the first"

    id: Required[int]
    scheduled_for: Required[str]
    state: NotRequired[JobState]


class ScheduleList(TypedDict, total=False):
    next: NotRequired[str]
    schedules: Required[list[Schedule]]


class ScheduleRequest(TypedDict, total=False):
    "Exactly one of cron and every_ms"

    catchup: NotRequired[ScheduleRequestCatchup]
    catchup_window_ms: NotRequired[int]
    cron: NotRequired[str]
    every_ms: NotRequired[int]
    jitter_ms: NotRequired[int]
    job: Required[ScheduleJob]
    overlap: NotRequired[ScheduleRequestOverlap]
    start_at: NotRequired[str]
    timezone: NotRequired[str]


class StateCounts(TypedDict, total=False):
    available: Required[int]
    cancelled: Required[int]
    claimed: Required[int]
    completed: Required[int]
    dead: Required[int]
    scheduled: Required[int]


class Stats(TypedDict, total=False):
    commits: Required[int]
    committed_ops: Required[int]
    refusals: Required[list[StatsRefusalsItem]]


class StatsRefusalsItem(TypedDict, total=False):
    code: Required[ErrorCode]
    count: Required[int]
    route: Required[str]


class StatusJobList(TypedDict, total=False):
    jobs: Required[list[Job]]
    total: Required[int]


class ThroughputBucket(TypedDict, total=False):
    claims: Required[int]
    completions: Required[int]
    failures: Required[int]
    start: Required[str]


class Whoami(TypedDict, total=False):
    auth: Required[bool]
    can: Required[Permissions]
    now: Required[str]
    principal: Required[str]
    roles: Required[list[Role]]


class Worker(TypedDict, total=False):
    "A worker label of a principal, as heard from by every server of the store"

    claims: Required[int]
    first_seen: Required[str]
    last_claim_at: NotRequired[str]
    last_heartbeat_at: NotRequired[str]
    last_seen: Required[str]
    principal: Required[str]
    worker: Required[str]


class Zombie(TypedDict, total=False):
    "A heartbeat, completion or failure refused because its caller no longer held the claim"

    at: Required[str]
    code: Required[ErrorCode]
    held_by: NotRequired[str]
    job: Required[int]
    job_state: NotRequired[JobState]
    message: Required[str]
    operation: Required[ZombieOperation]
    principal: Required[str]
    seq: Required[int]
    token_current: Required[int]
    token_sent: Required[int]
    worker: Required[str]


class ZombieList(TypedDict, total=False):
    refusals: Required[list[Zombie]]


class CompletedJob(Job, total=False):
    "The completed job"

    next: NotRequired[Job | None]
    next_jobs: NotRequired[list[Job]]


class Status(Whoami, total=False):
    "Everything the status page shows"

    audit: NotRequired[AuditStatus]
    bucket_seconds: Required[int]
    claimed: NotRequired[StatusJobList]
    dead: NotRequired[StatusJobList]
    leases: NotRequired[list[Lease]]
    queues: NotRequired[list[QueueCounts]]
    retrying: NotRequired[StatusJobList]
    scheduled: NotRequired[StatusJobList]
    schedules: NotRequired[list[Schedule]]
    throughput: NotRequired[list[ThroughputBucket]]
    workers: NotRequired[list[Worker]]
    zombies: NotRequired[list[Zombie]]


# The API's operations: operationId -> (method, path).
OPERATIONS: dict[str, tuple[str, str]] = {
    "acquireLease": ("POST", "/v1/leases/{name}/acquire"),
    "archiveAudit": ("GET", "/v1/audit/archive"),
    "asset": ("GET", "/assets/{name}"),
    "backup": ("GET", "/v1/backup"),
    "cancel": ("POST", "/v1/jobs/{id}/cancel"),
    "checkJob": ("POST", "/v1/jobs/{id}/check"),
    "checkLease": ("POST", "/v1/leases/{name}/check"),
    "claim": ("POST", "/v1/claim"),
    "complete": ("POST", "/v1/jobs/{id}/complete"),
    "completeBatch": ("POST", "/v1/jobs/complete"),
    "deleteSchedule": ("DELETE", "/v1/schedules/{name}"),
    "enqueue": ("POST", "/v1/jobs"),
    "fail": ("POST", "/v1/jobs/{id}/fail"),
    "failBatch": ("POST", "/v1/jobs/fail"),
    "favicon": ("GET", "/favicon.ico"),
    "getJob": ("GET", "/v1/jobs/{id}"),
    "getLease": ("GET", "/v1/leases/{name}"),
    "getSchedule": ("GET", "/v1/schedules/{name}"),
    "healthz": ("GET", "/healthz"),
    "heartbeat": ("POST", "/v1/jobs/{id}/heartbeat"),
    "heartbeatBatch": ("POST", "/v1/jobs/heartbeat"),
    "jobHistory": ("GET", "/v1/jobs/{id}/history"),
    "jobPage": ("GET", "/jobs/{id}"),
    "jobRefusals": ("GET", "/v1/jobs/{id}/refusals"),
    "listAudit": ("GET", "/v1/audit"),
    "listJobs": ("GET", "/v1/jobs"),
    "listLeases": ("GET", "/v1/leases"),
    "listSchedules": ("GET", "/v1/schedules"),
    "metrics": ("GET", "/metrics"),
    "openapi": ("GET", "/openapi.json"),
    "pauseQueue": ("POST", "/v1/queues/{queue}/pause"),
    "pauseSchedule": ("POST", "/v1/schedules/{name}/pause"),
    "putSchedule": ("PUT", "/v1/schedules/{name}"),
    "queues": ("GET", "/v1/queues"),
    "readyz": ("GET", "/readyz"),
    "releaseLease": ("POST", "/v1/leases/{name}/release"),
    "removeArchivedAudit": ("POST", "/v1/audit/archive/remove"),
    "renewLease": ("POST", "/v1/leases/{name}/renew"),
    "resumeQueue": ("POST", "/v1/queues/{queue}/resume"),
    "resumeSchedule": ("POST", "/v1/schedules/{name}/resume"),
    "retry": ("POST", "/v1/jobs/{id}/retry"),
    "stats": ("GET", "/v1/stats"),
    "status": ("GET", "/v1/status"),
    "statusPage": ("GET", "/"),
    "triggerSchedule": ("POST", "/v1/schedules/{name}/trigger"),
    "verifyAudit": ("GET", "/v1/audit/verify"),
    "whoami": ("GET", "/v1/whoami"),
}
