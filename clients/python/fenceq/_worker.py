"""The Worker: claims jobs, runs a handler on each, heartbeats every third
of the lease with the claim's fencing token, and completes or fails with
that token. Its behaviour follows the Go Worker (api/client/worker.go)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._client import APIError, Client, transient
from ._models import CompleteRequest, FailRequest, Job

log = logging.getLogger("fenceq.worker")

Outcome = Literal["completed", "failed", "lost", "unknown"]


class ClaimLost(Exception):
    """The claim is no longer this worker's: a heartbeat, the check, the
    completion or the failure was refused (404 or 409), or the lease ran out
    while the server could not be reached. The job must not be completed."""


class Failure(Exception):
    """Raise from a handler to choose how the job fails: retry_after (seconds,
    0 = at once) instead of the server's backoff, or final (dead at once)."""

    def __init__(self, message: str, *, retry_after: float | None = None, final: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.final = final


class JobContext:
    """What a handler gets: the job, its fencing token, and the claim's state.

    Hand `token` to the service your side effect lands in, or call
    `check()` before a side effect that cannot be undone."""

    def __init__(self, client: Client, worker: str, job: Job) -> None:
        self.job = job
        self.id: int = job["id"]
        self.token: int = job.get("fencing_token", job["attempts"])
        self.worker = worker
        self.payload: Any = job.get("payload")
        self._client = client
        self._lost = threading.Event()  # also readable from a blocking handler's thread
        self._loop = asyncio.get_running_loop()

    @property
    def lost(self) -> bool:
        """True once the claim is known to be lost."""
        return self._lost.is_set()

    def _mark_lost(self) -> None:
        self._lost.set()

    async def check(self) -> None:
        """Raise ClaimLost unless this claim is still current (POST /v1/jobs/{id}/check)."""
        if self.lost or not await self._client.check(self.id, self.token):
            self._mark_lost()
            raise ClaimLost(f"fenceq: job {self.id}: token {self.token} is no longer the current claim")

    def check_blocking(self) -> None:
        """check() for a blocking handler (runs it on the worker's event loop)."""
        asyncio.run_coroutine_threadsafe(self.check(), self._loop).result()


Handler = Callable[[JobContext], Awaitable[Any]] | Callable[[JobContext], Any]


@dataclass
class Done:
    """One finished job, reported to on_done."""

    job: Job
    outcome: Outcome
    error: BaseException | None = None
    stored: Job | None = None


class Worker:
    """Runs handler on jobs claimed through client.

    handler is a coroutine function (async def) taking a JobContext and
    returning the result (any JSON value), or with blocking=True a plain
    function run in a thread. An exception fails the attempt (see Failure);
    ClaimLost, or a claim lost while it runs, drops the outcome: nothing is
    reported to the server. When a heartbeat is refused the handler's task
    is cancelled (a blocking handler sees ctx.lost and its result is
    dropped)."""

    def __init__(
        self,
        client: Client,
        handler: Handler,
        *,
        name: str | None = None,
        queues: list[str] | None = None,
        concurrency: int = 1,
        lease: float = 30.0,
        wait: float = 30.0,
        drain_timeout: float = 30.0,
        blocking: bool = False,
        on_done: Callable[[Done], None] | None = None,
    ) -> None:
        if lease < 0.03:
            raise ValueError(f"fenceq: worker lease {lease}s is too short to heartbeat (at least 0.03 s)")
        self.client = client
        self.handler = handler
        self.name = name or socket.gethostname() or "worker"
        self.queues = queues or ["default"]
        self.concurrency = max(1, concurrency)
        self.lease = lease
        self.wait = wait
        self.drain_timeout = drain_timeout
        self.blocking = blocking
        self.on_done = on_done
        self._stopping: asyncio.Event | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._fatal: BaseException | None = None

    def stop(self) -> None:
        """Stop claiming; run() lets in-flight jobs finish (drain_timeout),
        then cancels them and fails them with their tokens so another
        worker takes them at once."""
        if self._stopping is not None:
            self._stopping.set()

    async def run(self, *, handle_signals: bool = False) -> None:
        """Claim and run jobs until stop() (or, with handle_signals, SIGTERM
        or SIGINT). Raises APIError when the server refuses the claim itself
        (a wrong queue name, a refused token, a missing role)."""
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        if self._fatal is not None:
            raise self._fatal

    async def _claim_loop(self) -> None:
        assert self._stopping is not None
        pause = 0.1
        slot_free = asyncio.Event()
        while not self._stopping.is_set():
            free = self.concurrency - len(self._running)
            if free <= 0:
                slot_free.clear()
                await _first(slot_free.wait(), self._stopping.wait())
                continue
            claim = asyncio.ensure_future(self.client.claim({
                "worker": self.name, "queues": self.queues, "lease_ms": int(self.lease * 1000),
                "wait_ms": int(self.wait * 1000), "max": free}))
            stop = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({claim, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not claim.done():  # stopping: abandon the long-poll
                claim.cancel()
                await asyncio.gather(claim, return_exceptions=True)
                break
            err = claim.exception()
            if err is not None:
                if isinstance(err, APIError) and not err.transient:
                    log.error("claim refused; stopping: %s", err)
                    self._fatal = err
                    self._stopping.set()
                    break
                log.warning("claim failed; trying again in %.1fs: %s", pause, err)
                await _first(asyncio.sleep(pause), self._stopping.wait())
                pause = min(2 * pause, 5.0)
                continue
            pause = 0.1
            for job in claim.result():
                task = asyncio.create_task(self._run_job(job))
                self._running.add(task)

                def finished(t: asyncio.Task[None]) -> None:
                    self._running.discard(t)
                    slot_free.set()
                task.add_done_callback(finished)

    async def _drain(self) -> None:
        if not self._running:
            return
        done, pending = await asyncio.wait(set(self._running), timeout=self.drain_timeout)
        if pending:
            log.warning("drain timeout: cancelling the %d jobs still running", len(pending))
            self._hard_stop = True
            for job_task in pending:
                job_task.cancel()  # _run_job cancels its handler and fails the job
            await asyncio.wait(pending)

    _hard_stop = False

    async def _run_job(self, job: Job) -> None:
        ctx = JobContext(self.client, self.name, job)
        handler_task: asyncio.Future[Any]
        try:
            if self.blocking:
                handler_task = asyncio.ensure_future(asyncio.to_thread(self.handler, ctx))
            else:
                result = self.handler(ctx)
                if not inspect.isawaitable(result):
                    raise TypeError("fenceq: the handler is not a coroutine function; pass blocking=True")
                handler_task = asyncio.ensure_future(result)
        except Exception as e:  # the job fails with it, like a handler's own error
            handler_task = asyncio.get_running_loop().create_future()
            handler_task.set_exception(e)
        beat = asyncio.create_task(self._heartbeat(ctx, handler_task))
        stopped = False
        try:
            try:
                value = await asyncio.shield(handler_task)
                err: BaseException | None = None
            except asyncio.CancelledError:
                if handler_task.cancelled() and ctx.lost:
                    raise ClaimLost(f"fenceq: job {ctx.id}: claim lost") from None
                # the drain timeout cancelled this job: stop the handler, fail the job at once
                stopped = True
                handler_task.cancel()
                await asyncio.gather(handler_task, return_exceptions=True)
                value, err = None, Failure("fenceq: worker stopped before the job finished", retry_after=0)
            except ClaimLost as e:
                ctx._mark_lost()
                raise e
            except Exception as e:
                value, err = None, e
        except ClaimLost as e:
            beat.cancel()
            log.warning("job %d: claim lost; its outcome is dropped", ctx.id)
            self._report(Done(job, "lost", e))
            return
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        if ctx.lost:
            self._report(Done(job, "lost", ClaimLost(f"fenceq: job {ctx.id}: claim lost")))
            return
        try:
            if err is None:
                creq: CompleteRequest = {"worker": self.name, "fencing_token": ctx.token, "result": value}
                stored = await self._deliver(lambda: self.client.complete(ctx.id, creq))
                self._report(Done(job, "completed", None, stored))
            else:
                freq: FailRequest = {"worker": self.name, "fencing_token": ctx.token, "error": str(err)[:4000]}
                if isinstance(err, Failure):
                    if err.retry_after is not None:
                        freq["retry_delay_ms"] = int(err.retry_after * 1000)
                    if err.final:
                        freq["final"] = True
                stored = await self._deliver(lambda: self.client.fail(ctx.id, freq))
                self._report(Done(job, "failed", err, stored))
        except APIError as e:
            if e.claim_lost:
                log.warning("job %d: claim lost: %s", ctx.id, e)
                self._report(Done(job, "lost", e))
            else:
                log.error("job %d: %s", ctx.id, e)
                self._report(Done(job, "unknown", e))
        except Exception as e:
            log.error("job %d: could not deliver the outcome: %s", ctx.id, e)
            self._report(Done(job, "unknown", e))
        if stopped:
            raise asyncio.CancelledError

    async def _deliver(self, call: Callable[[], Awaitable[Job]]) -> Job:
        """Send call until it gets an answer, for at most max(lease, 5 s):
        fenced calls are safe to repeat (a repeat of an applied one is refused)."""
        deadline = time.monotonic() + max(self.lease, 5.0)
        pause = 0.05
        while True:
            try:
                return await call()
            except Exception as e:
                if not transient(e) or time.monotonic() + pause > deadline:
                    raise
                log.warning("could not reach the server; sending again in %.2fs: %s", pause, e)
                await asyncio.sleep(pause)
                pause = min(2 * pause, 1.0)

    async def _heartbeat(self, ctx: JobContext, handler_task: asyncio.Future[Any]) -> None:
        """Every lease/3: extend the claim with its token. A refusal, or a
        lease that ran out while the server could not be reached, loses the
        claim and cancels the handler."""
        interval = self.lease / 3
        expires = time.monotonic() + self.lease
        while True:
            await asyncio.sleep(interval)
            try:
                await self.client.heartbeat(ctx.id, {"worker": self.name, "fencing_token": ctx.token,
                                                     "lease_ms": int(self.lease * 1000)})
                expires = time.monotonic() + self.lease
                continue
            except APIError as e:
                if not e.transient:
                    log.warning("job %d: heartbeat refused (%s): cancelling the handler", ctx.id, e)
                    break
            except Exception as e:
                log.warning("job %d: heartbeat not delivered: %s", ctx.id, e)
            if time.monotonic() >= expires:
                log.warning("job %d: the lease ran out without a heartbeat: cancelling the handler", ctx.id)
                break
        ctx._mark_lost()
        handler_task.cancel()

    def _report(self, d: Done) -> None:
        if self.on_done is not None:
            self.on_done(d)


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait for the first of aws; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
