"""The Python Client and Worker against the real binary."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from fenceq import APIError, ClaimLost, Client, Done, Failure, JobContext, TransportError, Worker
from fenceq._models import ClaimRequest, Job


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


class StopAfter:
    """An on_done that records each Done and stops the worker after n."""

    def __init__(self, n: int = 1) -> None:
        self.n = n
        self.dones: list[Done] = []
        self.worker: Worker | None = None

    def __call__(self, d: Done) -> None:
        self.dones.append(d)
        if len(self.dones) >= self.n and self.worker is not None:
            self.worker.stop()


def test_client_calls_carry_the_token_and_a_repeat_is_refused(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        assert await c.claim({"worker": "w", "queues": ["q"], "wait_ms": 50}) == []
        job = await c.enqueue({"queue": "q", "payload": {"n": 1}})
        [claimed] = await c.claim({"worker": "w", "queues": ["q"], "lease_ms": 3000, "wait_ms": 1000})
        assert claimed["id"] == job["id"] and claimed["fencing_token"] == 1
        await c.heartbeat(job["id"], {"worker": "w", "fencing_token": 1, "lease_ms": 3000})
        assert await c.check(job["id"], 1)
        assert not await c.check(job["id"], 2)
        with pytest.raises(APIError) as stale:
            await c.complete(job["id"], {"worker": "w", "fencing_token": 2, "result": "stale"})
        assert stale.value.status == 409 and stale.value.claim_lost
        assert (await c.get_job(job["id"]))["state"] == "claimed"  # the refusal changed nothing
        done = await c.complete(job["id"], {"worker": "w", "fencing_token": 1, "result": {"ok": True}})
        assert done["state"] == "completed" and done.get("result") == {"ok": True}
        with pytest.raises(APIError) as again:
            await c.complete(job["id"], {"worker": "w", "fencing_token": 1, "result": {"ok": False}})
        assert again.value.claim_lost
        assert (await c.get_job(job["id"])).get("result") == {"ok": True}
    run(main())


def test_worker_completes_jobs_concurrently_with_their_tokens(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        ids = {(await c.enqueue({"queue": "q", "payload": i}))["id"] for i in range(12)}
        running, peak, seen = 0, 0, []
        stop = StopAfter(12)
        dones = stop.dones

        async def handler(ctx: JobContext) -> Any:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            seen.append((ctx.id, ctx.token))
            await ctx.check()
            await asyncio.sleep(0.05)
            running -= 1
            return {"double": ctx.payload * 2}

        w = Worker(c, handler, name="py", queues=["q"], concurrency=4, lease=5, wait=1,
                   on_done=stop)
        stop.worker = w
        await w.run()
        assert peak == 4
        assert {d.job["id"] for d in dones} == ids and all(d.outcome == "completed" for d in dones)
        assert all(tok == 1 for _, tok in seen)
        for i in ids:
            j = await c.get_job(i)
            assert j["state"] == "completed" and j.get("result") == {"double": j["payload"] * 2}
    run(main())


def test_heartbeats_keep_a_one_second_lease_for_a_three_second_handler(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        job = await c.enqueue({"queue": "q"})
        stop = StopAfter()
        dones = stop.dones

        async def handler(ctx: JobContext) -> Any:
            await asyncio.sleep(3)
            return "slow"

        w = Worker(c, handler, queues=["q"], lease=1, wait=1, on_done=stop)
        stop.worker = w
        await w.run()
        assert [d.outcome for d in dones] == ["completed"]
        j = await c.get_job(job["id"])
        assert j["state"] == "completed" and j["attempts"] == 1  # never re-claimed
    run(main())


def test_a_refused_heartbeat_cancels_the_handler_and_nothing_is_reported(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        job = await c.enqueue({"queue": "q"})
        started, cancelled = asyncio.Event(), asyncio.Event()
        stop = StopAfter()
        dones = stop.dones

        async def handler(ctx: JobContext) -> Any:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "must not be stored"

        w = Worker(c, handler, queues=["q"], lease=0.6, wait=1, on_done=stop)
        stop.worker = w
        t = asyncio.create_task(w.run())
        await started.wait()
        await c.call("cancel", id=job["id"])  # the claim is gone: the next heartbeat is 404
        t0 = time.monotonic()
        await asyncio.wait_for(cancelled.wait(), 2)
        assert time.monotonic() - t0 < 0.6  # within a heartbeat interval (0.2 s) and its call
        await t
        assert [d.outcome for d in dones] == ["lost"]
        j = await c.get_job(job["id"])
        assert j["state"] == "cancelled" and "result" not in j
    run(main())


def test_stop_drains_in_flight_jobs_then_fails_the_rest_for_another_worker(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        quick = await c.enqueue({"queue": "q", "payload": "quick", "priority": 1})
        slow = await c.enqueue({"queue": "q", "payload": "slow"})
        started = 0
        both = asyncio.Event()

        async def handler(ctx: JobContext) -> Any:
            nonlocal started
            started += 1
            if started == 2:
                both.set()
            await asyncio.sleep(0.3 if ctx.payload == "quick" else 30)
            return ctx.payload

        w = Worker(c, handler, queues=["q"], concurrency=2, lease=3, wait=1, drain_timeout=1)
        t = asyncio.create_task(w.run())
        await both.wait()
        w.stop()
        await t
        assert (await c.get_job(quick["id"]))["state"] == "completed"
        s = await c.get_job(slow["id"])
        assert s["state"] == "available" and s["attempts"] == 1  # failed with its token, no delay
    run(main())


def test_a_blocking_handler_runs_in_a_thread(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        job = await c.enqueue({"queue": "q", "payload": 21})
        threads: list[str] = []

        def handler(ctx: JobContext) -> Any:
            threads.append(threading.current_thread().name)
            ctx.check_blocking()
            time.sleep(0.1)
            return ctx.payload * 2

        stop = StopAfter()
        w = Worker(c, handler, queues=["q"], lease=2, wait=1, blocking=True, on_done=stop)
        stop.worker = w
        await w.run()
        assert threads and threads[0] != threading.main_thread().name
        assert (await c.get_job(job["id"])).get("result") == 42
    run(main())


def test_a_failure_carries_its_delay_and_final(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        job = await c.enqueue({"queue": "q", "max_attempts": 5})

        async def handler(ctx: JobContext) -> Any:
            raise Failure("no good", final=True)

        stop = StopAfter()
        w = Worker(c, handler, queues=["q"], lease=2, wait=1, on_done=stop)
        stop.worker = w
        await w.run()
        j = await c.get_job(job["id"])
        assert j["state"] == "dead" and j["attempts"] == 1
    run(main())


def test_a_refused_claim_stops_the_worker_with_a_clear_error(server: str) -> None:
    async def main() -> None:
        async def handler(ctx: JobContext) -> Any:
            return None

        w = Worker(Client(server), handler, queues=["no spaces allowed"], wait=1)
        with pytest.raises(APIError) as e:
            await w.run()
        assert e.value.status == 400 and e.value.code == "invalid_argument"
    run(main())


def test_an_unreachable_server_is_a_transport_error_naming_it() -> None:
    async def main() -> None:
        with pytest.raises(TransportError, match="127.0.0.1:9"):
            await Client("http://127.0.0.1:9").get_job(1)
    run(main())


def test_claim_lost_is_raised_by_check_after_a_reclaim(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        job = await c.enqueue({"queue": "q"})
        [first] = await c.claim({"worker": "a", "queues": ["q"], "lease_ms": 50, "wait_ms": 100})
        await asyncio.sleep(0.1)
        [second] = await c.claim({"worker": "a", "queues": ["q"], "lease_ms": 5000, "wait_ms": 100})
        assert second["fencing_token"] == 2
        from fenceq._worker import JobContext as Ctx
        with pytest.raises(ClaimLost):
            await Ctx(c, "a", first).check()
        await Ctx(c, "a", second).check()
        assert job["id"] == first["id"]
    run(main())


def test_a_plain_function_without_blocking_fails_the_job_with_a_clear_error(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        job = await c.enqueue({"queue": "q"})

        def handler(ctx: JobContext) -> Any:
            return "not awaitable"

        stop = StopAfter()
        w = Worker(c, handler, queues=["q"], lease=2, wait=1, on_done=stop)
        stop.worker = w
        await w.run()
        assert [d.outcome for d in stop.dones] == ["failed"]
        j = await c.get_job(job["id"])
        assert j["state"] != "claimed" and "blocking=True" in str(j.get("last_error", j))
    run(main())


def _route_counts(metrics: str) -> dict[str, int]:
    """Requests per route (all statuses) from the server's /metrics."""
    counts: dict[str, int] = {}
    for line in metrics.splitlines():
        if line.startswith("fenceq_http_request_duration_seconds_count{"):
            labels, _, value = line.rpartition(" ")
            route = labels.split('route="', 1)[1].split('"', 1)[0]
            counts[route] = counts.get(route, 0) + int(float(value))
    return counts


def test_completions_go_out_in_batches_that_claim_the_next_jobs(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        ids = {(await c.enqueue({"queue": "batch", "payload": i}))["id"] for i in range(60)}

        async def handler(ctx: JobContext) -> Any:
            return ctx.payload

        stop = StopAfter(60)
        w = Worker(c, handler, queues=["batch"], concurrency=8, lease=5, wait=1, on_done=stop)
        stop.worker = w
        await w.run()
        assert sorted(d.job["id"] for d in stop.dones) == sorted(ids)
        assert {d.outcome for d in stop.dones} == {"completed"}
        for i in ids:
            assert (await c.get_job(i))["state"] == "completed"
    run(main())
    with urllib.request.urlopen(server + "/metrics") as r:  # text, not JSON
        counts = _route_counts(r.read().decode())
    assert counts.get("/v1/jobs/:id", 0) >= 60, counts  # the route names are echo's templates
    # No completion went out alone; fewer batches and claims than jobs:
    # claim_next took the next jobs with the completions.
    assert counts.get("/v1/jobs/:id/complete", 0) == 0, counts
    assert 0 < counts.get("/v1/jobs/complete", 0) < 60, counts
    assert counts.get("/v1/claim", 0) < 60, counts


class CountingProxy:
    """A TCP proxy to the server that counts the connections made to it
    and can cut them all (as a server's idle timeout or restart would)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.accepted = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        ur, uw = await asyncio.open_connection(self.host, self.port)
        self.writers += [w, uw]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    def cut(self) -> None:
        for w in self.writers:
            w.close()
        self.writers = []


def test_calls_share_one_kept_alive_connection_and_a_cut_one_is_replaced(server: str) -> None:
    async def main() -> None:
        proxy = CountingProxy(server)
        c = Client(await proxy.start())
        job = await c.enqueue({"queue": "ka"})
        for _ in range(30):
            assert (await c.get_job(job["id"]))["id"] == job["id"]
        assert proxy.accepted == 1, f"{proxy.accepted} connections for 31 calls one after the other"
        # Four at once: one connection each, kept for the next four.
        await asyncio.gather(*(c.get_job(job["id"]) for _ in range(4)))
        await asyncio.gather(*(c.get_job(job["id"]) for _ in range(4)))
        assert proxy.accepted <= 4, proxy.accepted
        before = proxy.accepted
        proxy.cut()  # every idle connection is closed by the other side
        await asyncio.sleep(0.05)
        assert (await c.get_job(job["id"]))["id"] == job["id"]
        assert proxy.accepted == before + 1
        c.close()
        proxy.server.close()
    run(main())


def test_a_worker_whose_server_never_answers_stops_naming_the_url() -> None:
    async def main() -> None:
        async def handler(ctx: JobContext) -> Any:
            return None

        w = Worker(Client("http://127.0.0.1:9"), handler, start_timeout=0.5, wait=1)
        t0 = time.monotonic()
        with pytest.raises(TransportError, match="http://127.0.0.1:9"):
            await w.run()
        assert time.monotonic() - t0 < 10
    run(main())


def test_a_refused_item_of_a_batched_completion_is_lost_and_the_others_complete(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        a = await c.enqueue({"queue": "items", "payload": "a"})
        b = await c.enqueue({"queue": "items", "payload": "b"})
        release = asyncio.Event()
        started: list[int] = []

        async def handler(ctx: JobContext) -> Any:
            started.append(ctx.id)
            await release.wait()
            return ctx.payload

        stop = StopAfter(2)
        # A 30 s lease: no heartbeat comes before the batch, so only the
        # completion can find job a's claim gone.
        w = Worker(c, handler, queues=["items"], concurrency=2, lease=30, wait=1, on_done=stop)
        stop.worker = w
        run_task = asyncio.create_task(w.run())
        while len(started) < 2:
            await asyncio.sleep(0.01)
        await c.call("cancel", id=a["id"])
        release.set()  # both return at once: one batch
        await run_task
        outcomes = {d.job["id"]: d.outcome for d in stop.dones}
        assert outcomes == {a["id"]: "lost", b["id"]: "completed"}, outcomes
        ja, jb = await c.get_job(a["id"]), await c.get_job(b["id"])
        assert ja["state"] == "cancelled" and ja.get("result") is None, ja
        assert jb["state"] == "completed" and jb.get("result") == "b", jb
    run(main())


class RecordingClient(Client):
    """A Client that records the max each long-poll claim asks for."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.claim_max: list[int] = []

    async def claim(self, req: ClaimRequest) -> list[Job]:
        self.claim_max.append(req.get("max", 1))
        return await super().claim(req)


async def _states(c: Client, ids: list[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in ids:
        s = (await c.get_job(i))["state"]
        counts[s] = counts.get(s, 0) + 1
    return counts


def _ts(s: str) -> float:
    """An RFC 3339 time of the server's (nanoseconds) as a Unix time."""
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", s).replace("Z", "+00:00")).timestamp()


async def _until(cond: Callable[[], Awaitable[bool]], within: float = 5) -> None:
    deadline = time.monotonic() + within
    while not await cond():
        assert time.monotonic() < deadline, "not within %.1fs" % within
        await asyncio.sleep(0.02)


def test_prefetch_holds_claimed_jobs_beyond_the_handlers_and_heartbeats_them(server: str) -> None:
    async def main() -> None:
        c = RecordingClient(server)
        ids = [(await c.enqueue({"queue": "pf", "payload": i}))["id"] for i in range(8)]
        release = asyncio.Event()
        running, peak, started = 0, 0, []

        async def handler(ctx: JobContext) -> Any:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            started.append(ctx.id)
            await release.wait()
            running -= 1
            return ctx.payload

        stop = StopAfter(8)
        w = Worker(c, handler, queues=["pf"], concurrency=2, prefetch=3, lease=1, wait=1, on_done=stop)
        stop.worker = w
        t = asyncio.create_task(w.run())

        async def five_claimed() -> bool:
            return await _states(c, ids) == {"claimed": 5, "available": 3} and len(started) == 2
        await _until(five_claimed)
        assert c.claim_max[0] == 5  # concurrency + prefetch
        await asyncio.sleep(1.5)  # more than a lease: the waiting jobs' heartbeats keep them
        assert await _states(c, ids) == {"claimed": 5, "available": 3}
        for i in ids:
            j = await c.get_job(i)
            if j["state"] == "claimed":  # an expired lease still shows claimed: its expiry tells
                assert j["attempts"] == 1 and _ts(j["lease_expires_at"]) > time.time(), j
        assert len(started) == 2
        release.set()
        await t
        assert sorted(d.job["id"] for d in stop.dones) == ids
        assert {d.outcome for d in stop.dones} == {"completed"}
        for i in ids:
            j = await c.get_job(i)
            assert j["state"] == "completed" and j["attempts"] == 1
        assert peak == 2 and sorted(started) == ids
    run(main())


def test_stop_runs_the_waiting_jobs_during_the_drain(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        ids = [(await c.enqueue({"queue": "pf", "payload": i}))["id"] for i in range(3)]
        release = asyncio.Event()
        started: list[int] = []

        async def handler(ctx: JobContext) -> Any:
            started.append(ctx.id)
            await release.wait()
            return ctx.payload

        dones: list[Done] = []
        w = Worker(c, handler, queues=["pf"], concurrency=1, prefetch=2, lease=1, wait=1, drain_timeout=10,
                   on_done=dones.append)
        t = asyncio.create_task(w.run())

        async def all_claimed() -> bool:
            return await _states(c, ids) == {"claimed": 3} and len(started) == 1
        await _until(all_claimed)
        w.stop()
        await asyncio.sleep(0.1)
        release.set()
        await t
        assert started == ids  # in claim order
        assert [d.outcome for d in dones] == ["completed"] * 3
        for i in ids:
            j = await c.get_job(i)
            assert j["state"] == "completed" and j["attempts"] == 1
    run(main())


def test_the_drain_timeout_fails_waiting_jobs_without_running_them(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        ids = [(await c.enqueue({"queue": "pf", "payload": i}))["id"] for i in range(3)]
        started: list[int] = []

        async def handler(ctx: JobContext) -> Any:
            started.append(ctx.id)
            await asyncio.sleep(30)

        dones: list[Done] = []
        w = Worker(c, handler, queues=["pf"], concurrency=1, prefetch=2, lease=3, wait=1, drain_timeout=0.5,
                   on_done=dones.append)
        t = asyncio.create_task(w.run())

        async def all_claimed() -> bool:
            return await _states(c, ids) == {"claimed": 3} and len(started) == 1
        await _until(all_claimed)
        w.stop()
        await t
        assert started == ids[:1]  # the handler ran for the started job only
        assert sorted(d.job["id"] for d in dones) == ids and {d.outcome for d in dones} == {"failed"}
        for i in ids:
            j = await c.get_job(i)
            assert j["attempts"] == 1 and "worker stopped" in j.get("last_error", ""), j
            # claimable at once: no backoff
            assert j["state"] == "available" or (j["state"] == "scheduled" and j["run_at"] <= j["updated_at"]), j
        assert len(await c.claim({"worker": "other", "queues": ["pf"], "max": 3, "wait_ms": 1000})) == 3
    run(main())


def test_a_waiting_job_cancelled_is_reported_lost_at_once_and_never_runs(server: str) -> None:
    async def main() -> None:
        c = Client(server)
        first = await c.enqueue({"queue": "pf", "payload": "first"})
        second = await c.enqueue({"queue": "pf", "payload": "second"})
        release, lost = asyncio.Event(), asyncio.Event()
        started: list[int] = []
        dones: list[Done] = []

        def on_done(d: Done) -> None:
            dones.append(d)
            if d.outcome == "lost":
                lost.set()

        async def handler(ctx: JobContext) -> Any:
            started.append(ctx.id)
            await release.wait()
            return ctx.payload

        w = Worker(c, handler, queues=["pf"], concurrency=1, prefetch=1, lease=1, wait=1, on_done=on_done)
        t = asyncio.create_task(w.run())

        async def both_claimed() -> bool:
            return await _states(c, [first["id"], second["id"]]) == {"claimed": 2} and len(started) == 1
        await _until(both_claimed)
        await c.call("cancel", id=second["id"])
        await asyncio.wait_for(lost.wait(), 3)  # while the first handler still blocks
        assert not release.is_set() and started == [first["id"]]
        assert [(d.job["id"], d.outcome) for d in dones] == [(second["id"], "lost")]
        # its room is claimed again
        third = await c.enqueue({"queue": "pf", "payload": "third"})

        async def third_claimed() -> bool:
            return (await c.get_job(third["id"]))["state"] == "claimed"
        await _until(third_claimed, 3)
        assert started == [first["id"]]
        release.set()

        async def two_done() -> bool:
            return len(dones) == 3
        await _until(two_done)
        w.stop()
        await t
        assert started == [first["id"], third["id"]]  # never the cancelled one
        assert (await c.get_job(second["id"]))["state"] == "cancelled"
    run(main())


def test_a_negative_prefetch_is_refused(server: str) -> None:
    with pytest.raises(ValueError, match="prefetch"):
        Worker(Client(server), lambda ctx: None, prefetch=-1)
