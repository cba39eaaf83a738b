"""The Worker: claims jobs, runs a handler on each, heartbeats every third
of the lease with the claim's fencing token, and completes or fails with
that token. Its behaviour follows the Go Worker (api/client/worker.go)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._client import APIError, Client, TransportError, transient
from ._models import (
    BatchCompleteRequest,
    BatchCompleteRequestJobsItem,
    BatchFailRequestJobsItem,
    BatchResult,
    BatchResultResultsItem,
    Job,
)

log = logging.getLogger("fenceq.worker")

Outcome = Literal["completed", "failed", "lost", "unknown"]

MAX_BATCH = 1000  # the most jobs one batched call may carry


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


@dataclass(eq=False)
class _Held:
    """A job the worker holds a claim on, heartbeated from its claim until
    its handler ends: waiting for a free handler (prefetch) while handler
    is None, then running."""

    ctx: JobContext
    beat: asyncio.Task[None] | None = None
    handler: asyncio.Future[Any] | None = None


@dataclass
class _Outcome:
    """A handler's answer, waiting to be sent."""

    ctx: JobContext
    value: Any
    err: BaseException | None


class Worker:
    """Runs handler on jobs claimed through client.

    handler is a coroutine function (async def) taking a JobContext and
    returning the result (any JSON value), or with blocking=True a plain
    function run in a thread. An exception fails the attempt (see Failure);
    ClaimLost, or a claim lost while it runs, drops the outcome: nothing is
    reported to the server. When a heartbeat is refused the handler's task
    is cancelled (a blocking handler sees ctx.lost and its result is
    dropped).

    Outcomes go out in batches, as the Go Worker's do: one completion
    call at a time carries every completion that came in meanwhile (POST
    /v1/jobs/complete, each item with its own token and its own answer)
    and claims replacements for the handlers it frees in the same
    transaction (claim_next); failures go out the same way (POST
    /v1/jobs/fail).

    start_timeout: when the server has not answered any claim for that
    long since run() began (a wrong URL, nothing listening), run() raises
    the TransportError naming the URL. None (the default) keeps trying.

    prefetch: how many claimed jobs the worker may hold beyond its
    concurrency handlers (0, the default: none). A job claimed while every
    handler is busy waits in the worker, in claim order, for the first
    handler to free up; it is heartbeated while it waits, and reported lost
    at once (never run) if a heartbeat is refused. On stop, waiting jobs
    still run during the drain; those not started when drain_timeout
    passes are failed without running the handler, for a retry at once."""

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
        start_timeout: float | None = None,
        prefetch: int = 0,
    ) -> None:
        if prefetch < 0:
            raise ValueError(f"fenceq: worker prefetch {prefetch} is negative (0 holds no job beyond concurrency)")
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
        self.start_timeout = start_timeout
        self.prefetch = prefetch
        self._stopping: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._fatal: BaseException | None = None
        self._busy = 0  # handlers running
        self._waiting: list[_Held] = []  # claimed, waiting for a free handler, in claim order
        self._asked = 0  # jobs asked for by calls in flight
        self._pending: list[_Outcome] = []
        self._handlers: dict[int, tuple[JobContext, asyncio.Future[Any]]] = {}
        self._hard_stop = False
        self._tasks: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        """Stop claiming; run() lets in-flight jobs finish (drain_timeout),
        then cancels them and fails them with their tokens so another
        worker takes them at once."""
        if self._stopping is not None and self._wake is not None:
            self._stopping.set()
            self._wake.set()

    async def run(self, *, handle_signals: bool = False) -> None:
        """Claim and run jobs until stop() (or, with handle_signals, SIGTERM
        or SIGINT). Raises APIError when the server refuses the claim itself
        (a wrong queue name, a refused token, a missing role), and
        TransportError when it never answered within start_timeout."""
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        try:
            await self._loop()
        finally:
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        if self._fatal is not None:
            raise self._fatal

    def _free(self) -> int:
        """The room: jobs the worker may claim now."""
        return self.concurrency + self.prefetch - self._busy - len(self._waiting) - self._asked

    def _start(self, jobs: list[Job]) -> None:
        """Hold the claimed jobs (heartbeated from now on) and start as many
        as there are free handlers; the rest wait."""
        for job in jobs:
            h = _Held(JobContext(self.client, self.name, job))
            h.beat = asyncio.create_task(self._heartbeat(h))
            self._waiting.append(h)
        self._run_waiting()

    def _run_waiting(self) -> None:
        """Start waiting jobs on the free handlers, in claim order; after
        the drain timeout, fail them without running the handler."""
        if self._hard_stop and self._waiting:
            not_started, self._waiting = self._waiting, []
            for h in not_started:
                if h.beat is not None:
                    h.beat.cancel()
                self._pending.append(_Outcome(h.ctx, None, Failure(
                    "fenceq: worker stopped before the job finished (not started)", retry_after=0)))
            assert self._wake is not None
            self._wake.set()
        while self._busy < self.concurrency and self._waiting:
            h = self._waiting.pop(0)
            self._busy += 1
            task = asyncio.create_task(self._run_job(h))
            self._tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._tasks.discard)

    async def _loop(self) -> None:
        """One task owns the worker's state: one long-poll claim at a time
        for the free handlers, one finish call at a time for the outcomes
        that came in, and the drain."""
        assert self._stopping is not None and self._wake is not None
        wake = self._wake
        claim: asyncio.Task[list[Job]] | None = None
        claim_n = 0
        finish: asyncio.Task[list[Job]] | None = None
        finish_n = 0
        retry_at = 0.0
        pause = 0.1
        answered = False
        began = time.monotonic()
        drain_until: float | None = None
        lease_ms = int(self.lease * 1000)
        while True:
            stopping = self._stopping.is_set()
            now = time.monotonic()
            if stopping and drain_until is None:
                drain_until = now + self.drain_timeout
            # Claim for free handlers unless a finish call is about to
            # claim replacements for them in its own transaction.
            if (not stopping and claim is None and now >= retry_at and self._free() > 0
                    and finish is None and not self._pending):
                claim_n = self._free()
                self._asked += claim_n
                claim = asyncio.create_task(self.client.claim({
                    "worker": self.name, "queues": self.queues, "lease_ms": lease_ms,
                    "wait_ms": int(self.wait * 1000), "max": claim_n}))
                claim.add_done_callback(lambda _: wake.set())
            if finish is None and self._pending:
                batch, self._pending = self._pending, []
                completions = sum(1 for o in batch if o.err is None)
                # Replacements for the handlers this batch frees (and room
                # for prefetch), and no more: the bound on what a lost
                # reply can leave claimed.
                finish_n = 0 if stopping else max(0, min(self._free(), completions + self.prefetch))
                self._asked += finish_n
                finish = asyncio.create_task(self._finish(batch, finish_n))
                finish.add_done_callback(lambda _: wake.set())
            if stopping and claim is not None and not claim.done():
                claim.cancel()  # abandon the long-poll
            if (stopping and self._busy == 0 and not self._waiting and claim is None and finish is None
                    and not self._pending):
                return
            if (drain_until is not None and now >= drain_until and not self._hard_stop
                    and (self._handlers or self._waiting)):
                log.warning("drain timeout: cancelling the %d jobs still running, failing the %d not started",
                            len(self._handlers), len(self._waiting))
                self._hard_stop = True
                for _, task in list(self._handlers.values()):
                    task.cancel()  # _run_job fails the job at once
                self._run_waiting()  # fails the waiting ones without running them
            timeout: float | None = None
            if retry_at > now and not stopping:
                timeout = retry_at - now
            if drain_until is not None and not self._hard_stop:
                timeout = max(0.0, drain_until - now) if timeout is None else min(timeout, drain_until - now)
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except TimeoutError:
                pass
            wake.clear()
            # Both calls may have ended in one wake-up: take each (no
            # continue here, or the other's wake-up would be lost).
            if claim is not None and claim.done():
                self._asked -= claim_n
                done_claim, claim = claim, None
                err = None if done_claim.cancelled() else done_claim.exception()
                if done_claim.cancelled():
                    pass  # abandoned on stop
                elif err is None:
                    answered = True
                    pause = 0.1
                    self._start(done_claim.result())  # even when stopping: they are claimed
                else:
                    answered = answered or isinstance(err, APIError)
                    if self._stopping.is_set():
                        pass
                    elif not answered and self.start_timeout is not None and \
                            time.monotonic() - began >= self.start_timeout:
                        log.error("the server never answered; stopping: %s", err)
                        self._fatal = TransportError(
                            f"fenceq: worker: no answer from {self.client.base_url} within {self.start_timeout:g}s: {err}")
                        self.stop()
                    elif isinstance(err, APIError) and not err.transient:
                        log.error("claim refused; stopping: %s", err)
                        self._fatal = err
                        self.stop()
                    else:
                        log.warning("claim failed; trying again in %.1fs: %s", pause, err)
                        retry_at = time.monotonic() + pause
                        pause = min(2 * pause, 5.0)
            if finish is not None and finish.done():
                self._asked -= finish_n
                done_finish, finish = finish, None
                self._start(done_finish.result())

    async def _run_job(self, h: _Held) -> None:
        try:
            outcome = await self._run_handler(h)
        finally:
            self._busy -= 1
            self._handlers.pop(h.ctx.id, None)
            assert self._wake is not None
            self._wake.set()
        if outcome is not None:
            self._pending.append(outcome)
        self._run_waiting()  # the next waiting job takes the freed handler at once

    async def _run_handler(self, h: _Held) -> _Outcome | None:
        """Run the handler, heartbeated by h.beat; None when the claim was
        lost (reported here), else the outcome to send."""
        ctx = h.ctx
        handler_task: asyncio.Future[Any]
        if ctx.lost:  # a heartbeat found the claim lost before the handler started
            if h.beat is not None:
                h.beat.cancel()
            self._report(Done(ctx.job, "lost", ClaimLost(f"fenceq: job {ctx.id}: claim lost")))
            return None
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
        h.handler = handler_task
        self._handlers[ctx.id] = (ctx, handler_task)
        if self._hard_stop:
            handler_task.cancel()
        beat = h.beat
        assert beat is not None
        value: Any = None
        err: BaseException | None = None
        try:
            value = await handler_task
        except asyncio.CancelledError:
            if not ctx.lost:
                # the drain timeout cancelled this job: fail it at once
                err = Failure("fenceq: worker stopped before the job finished", retry_after=0)
        except ClaimLost:
            ctx._mark_lost()
        except Exception as e:
            err = e
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        if ctx.lost:
            log.warning("job %d: claim lost; its outcome is dropped", ctx.id)
            self._report(Done(ctx.job, "lost", ClaimLost(f"fenceq: job {ctx.id}: claim lost")))
            return None
        if err is None:
            try:
                json.dumps(value)
            except (TypeError, ValueError) as e:
                err = TypeError(f"fenceq: the handler's result cannot be sent as JSON: {e}")
        return _Outcome(ctx, value, err)

    async def _finish(self, batch: list[_Outcome], claim_max: int) -> list[Job]:
        """Send a batch of outcomes: the completions (with claim_next for
        claim_max jobs), then the failures; report each job; return the
        jobs claim_next claimed. Never raises."""
        next_jobs: list[Job] = []
        completes = [o for o in batch if o.err is None]
        fails = [o for o in batch if o.err is not None]
        lease_ms = int(self.lease * 1000)
        for i in range(0, len(completes), MAX_BATCH):
            chunk = completes[i:i + MAX_BATCH]
            items: list[BatchCompleteRequestJobsItem] = [
                {"id": o.ctx.id, "fencing_token": o.ctx.token, "result": o.value} for o in chunk]
            attempts = 0

            async def complete(items: list[BatchCompleteRequestJobsItem] = items) -> BatchResult:
                nonlocal attempts
                req: BatchCompleteRequest = {"worker": self.name, "jobs": items}
                # A repeat asks for no replacements: an applied first try
                # must not leave more claimed jobs nobody knows of.
                if attempts == 0 and claim_max > 0:
                    req["claim_next"] = {"queues": self.queues, "lease_ms": lease_ms, "max": claim_max}
                attempts += 1
                return await self.client.complete_many(req)

            try:
                res = await self._deliver(complete)
            except Exception as e:
                for o in chunk:
                    self._undelivered(o, e)
                claim_max = 0
                continue
            claim_max = 0
            next_jobs += res.get("next_jobs") or []
            for o, r in zip(chunk, res["results"]):
                if "job" in r:
                    self._report(Done(o.ctx.job, "completed", None, r["job"]))
                    continue
                ie = _item_error(r, "completeBatch")
                if ie.claim_lost:
                    if attempts > 1 and await self._completed_by_us(o.ctx):
                        self._report(Done(o.ctx.job, "completed"))  # the first try was applied
                    else:
                        log.warning("job %d: completion refused: the claim was lost: %s", o.ctx.id, ie)
                        self._report(Done(o.ctx.job, "lost", ie))
                elif ie.transient:
                    self._undelivered(o, ie)
                else:
                    # The server refuses the completion itself (a result
                    # too large): fail the attempt rather than let it expire.
                    o.err = ie
                    fails.append(o)
        for i in range(0, len(fails), MAX_BATCH):
            fchunk = fails[i:i + MAX_BATCH]
            fitems: list[BatchFailRequestJobsItem] = []
            for o in fchunk:
                item: BatchFailRequestJobsItem = {"id": o.ctx.id, "fencing_token": o.ctx.token,
                                                  "error": str(o.err)[:4000]}
                if isinstance(o.err, Failure):
                    if o.err.retry_after is not None:
                        item["retry_delay_ms"] = int(o.err.retry_after * 1000)
                    if o.err.final:
                        item["final"] = True
                fitems.append(item)

            async def fail(items: list[BatchFailRequestJobsItem] = fitems) -> BatchResult:
                return await self.client.fail_many({"worker": self.name, "jobs": items})

            try:
                res = await self._deliver(fail)
            except Exception as e:
                for o in fchunk:
                    self._undelivered(o, e)
                continue
            for o, r in zip(fchunk, res["results"]):
                if "job" in r:
                    self._report(Done(o.ctx.job, "failed", o.err, r["job"]))
                    continue
                fe = _item_error(r, "failBatch")
                if fe.claim_lost:
                    log.warning("job %d: failure refused: the claim was lost: %s", o.ctx.id, fe)
                    self._report(Done(o.ctx.job, "lost", fe))
                else:
                    self._undelivered(o, fe)
        return next_jobs

    def _undelivered(self, o: _Outcome, e: BaseException) -> None:
        if isinstance(e, APIError) and e.claim_lost:
            log.warning("job %d: claim lost: %s", o.ctx.id, e)
            self._report(Done(o.ctx.job, "lost", e))
        else:
            log.error("job %d: could not deliver the outcome: %s", o.ctx.id, e)
            self._report(Done(o.ctx.job, "unknown", e))

    async def _completed_by_us(self, ctx: JobContext) -> bool:
        """Whether the job is completed by this claim: only its holder could
        complete it with its token."""
        try:
            j = await self.client.get_job(ctx.id)
        except Exception:
            return False
        return j.get("state") == "completed" and j.get("attempts") == ctx.token

    async def _deliver(self, call: Callable[[], Awaitable[BatchResult]]) -> BatchResult:
        """Send call until it gets an answer, for at most max(lease, 5 s):
        fenced calls are safe to repeat (a repeat of an applied one is refused)."""
        deadline = time.monotonic() + max(self.lease, 5.0)
        pause = 0.05
        while True:
            try:
                res = await call()
                if not isinstance(res, dict) or not isinstance(res.get("results"), list):
                    raise TransportError("fenceq: a batch answer without results")
                return res
            except Exception as e:
                if not transient(e) or time.monotonic() + pause > deadline:
                    raise
                log.warning("could not reach the server; sending again in %.2fs: %s", pause, e)
                await asyncio.sleep(pause)
                pause = min(2 * pause, 1.0)

    async def _heartbeat(self, h: _Held) -> None:
        """Every lease/3 from the claim on: extend the claim with its token.
        A refusal, or a lease that ran out while the server could not be
        reached, loses the claim and cancels the handler; a job still
        waiting for a handler is reported lost at once and never runs."""
        ctx = h.ctx
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
        if h.handler is not None:
            h.handler.cancel()
        elif h in self._waiting:
            self._waiting.remove(h)
            log.warning("job %d: claim lost while it waited for a handler; it does not run", ctx.id)
            self._report(Done(ctx.job, "lost", ClaimLost(f"fenceq: job {ctx.id}: claim lost")))
            assert self._wake is not None
            self._wake.set()  # its room can be claimed again
        # else: its handler is starting; _run_handler sees ctx.lost

    def _report(self, d: Done) -> None:
        if self.on_done is not None:
            self.on_done(d)


_CODE_STATUS = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403, "not_found": 404,
                "failed_precondition": 409, "already_exists": 409, "resource_exhausted": 413, "unavailable": 503}


def _item_error(r: BatchResultResultsItem, operation: str) -> APIError:
    """A refused item of a batch as the error the single call would have raised."""
    e = r.get("error")
    code = str(e.get("code", "")) if e else ""
    message = str(e.get("message", "")) if e else "an item with neither a job nor an error"
    return APIError(_CODE_STATUS.get(code, 500), code, message, f"{operation} (job {r.get('id')})")


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait for the first of aws; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
