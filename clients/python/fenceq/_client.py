"""The Client: one method per call of the API the Worker needs, typed with
the generated request and reply types (fenceq._models)."""

from __future__ import annotations

import json
import ssl
from typing import Any, cast

from . import _http
from ._models import (
    OPERATIONS,
    BatchCompleteRequest,
    BatchFailRequest,
    BatchResult,
    CheckRequest,
    ClaimRequest,
    CompletedJob,
    CompleteRequest,
    EnqueueRequest,
    FailRequest,
    HeartbeatRequest,
    Job,
    JobCheck,
    JobList,
)

TransportError = _http.TransportError


class APIError(Exception):
    """The server answered with an error: status, its stable code and message."""

    def __init__(self, status: int, code: str, message: str, operation: str) -> None:
        super().__init__(f"fenceq: {operation}: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @property
    def claim_lost(self) -> bool:
        """404 and 409 on a fenced call: the claim is no longer this worker's."""
        return self.status in (404, 409)

    @property
    def transient(self) -> bool:
        """The server could not decide (5xx, 429, 408): the same call may be sent again."""
        return self.status >= 500 or self.status in (408, 429)


def transient(err: BaseException) -> bool:
    """No answer, or an answer that says the call may be sent again."""
    return isinstance(err, TransportError) or (isinstance(err, APIError) and err.transient)


class Client:
    """A fenceq server at base_url ("http://127.0.0.1:7420"), with an
    optional bearer token. Every method is a coroutine. Calls share
    persistent HTTP/1.1 connections, one per concurrent caller.

    For https:// with a private CA, give ca_file (a PEM file of the
    certificates to trust) or a whole ssl_context."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        if ssl_context is None and ca_file is not None:
            ssl_context = ssl.create_default_context(cafile=ca_file)
        self._conns = _http.Connections(self.base_url, ssl_context)

    def close(self) -> None:
        """Close the idle connections (calls after it open new ones)."""
        self._conns.close()

    async def call(self, operation: str, body: Any = None, *, timeout: float | None = None,
                   **path_params: Any) -> tuple[int, Any]:
        """Send the API operation (an operationId of api/openapi.json) and
        return (status, decoded JSON body or None). An error status raises
        APIError; no answer raises TransportError."""
        method, path = OPERATIONS[operation]
        for k, v in path_params.items():
            path = path.replace("{" + k + "}", str(v))
        status, raw = await self._conns.request(
            method, path, body, headers=self._headers, timeout=self.timeout if timeout is None else timeout)
        decoded: Any = None
        if raw:
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = None
        if status >= 400:
            err = decoded.get("error") if isinstance(decoded, dict) else None
            if isinstance(err, dict):
                raise APIError(status, str(err.get("code", "")), str(err.get("message", "")), operation)
            raise APIError(status, "", raw[:200].decode("utf-8", "replace"), operation)
        return status, decoded

    async def enqueue(self, req: EnqueueRequest) -> Job:
        _, job = await self.call("enqueue", req)
        return cast(Job, job)

    async def get_job(self, job_id: int) -> Job:
        _, job = await self.call("getJob", id=job_id)
        return cast(Job, job)

    async def claim(self, req: ClaimRequest) -> list[Job]:
        """Claim with a long-poll; [] when nothing came within wait_ms. The
        HTTP timeout is set above the wait."""
        wait_s = req.get("wait_ms", 0) / 1000
        status, body = await self.call("claim", req, timeout=self.timeout + min(wait_s, 60.0))
        if status == 204 or body is None:
            return []
        if "max" in req:
            return cast(JobList, body)["jobs"]
        return [cast(Job, body)]

    async def heartbeat(self, job_id: int, req: HeartbeatRequest) -> Job:
        _, job = await self.call("heartbeat", req, id=job_id)
        return cast(Job, job)

    async def complete(self, job_id: int, req: CompleteRequest) -> CompletedJob:
        _, job = await self.call("complete", req, id=job_id)
        return cast(CompletedJob, job)

    async def fail(self, job_id: int, req: FailRequest) -> Job:
        _, job = await self.call("fail", req, id=job_id)
        return cast(Job, job)

    async def complete_many(self, req: BatchCompleteRequest) -> BatchResult:
        """Complete several claims in one call and one transaction (POST
        /v1/jobs/complete); each item is decided as complete() would be,
        and claim_next claims more jobs in the same transaction."""
        _, body = await self.call("completeBatch", req)
        return cast(BatchResult, body)

    async def fail_many(self, req: BatchFailRequest) -> BatchResult:
        """Fail several claims in one call and one transaction (POST /v1/jobs/fail)."""
        _, body = await self.call("failBatch", req)
        return cast(BatchResult, body)

    async def check(self, job_id: int, token: int) -> bool:
        """True while token is the job's current claim; False once it is not (409)."""
        req: CheckRequest = {"fencing_token": token}
        try:
            _, body = await self.call("checkJob", req, id=job_id)
        except APIError as e:
            if e.status == 409:
                return False
            raise
        return bool(cast(JobCheck, body).get("current"))
