"""The Python Worker as the worker-protocol suite drives it (e2e/workerprotocol_test.go).

Env: WP_URL, WP_QUEUE, WP_NAME, WP_LEASE_MS; optional: WP_TOKEN, WP_CA_FILE (a CA to
trust over https), WP_START_TIMEOUT_MS (give up on a server that never answers),
WP_PREFETCH (the Worker's prefetch=, 0 by default). Each job's payload is
{"sleep_ms": N, "result": R}: the handler sleeps N ms and returns
{"by": WP_NAME, "r": R}. Events go to stdout, one JSON object a line:
start (id, token), cancelled (id), done (id, outcome). SIGTERM drains."""

import asyncio
import json
import os
import sys
from typing import Any

from fenceq import Client, Done, JobContext, Worker


def event(**kv: Any) -> None:
    print(json.dumps(kv), flush=True)


async def main() -> None:
    name = os.environ["WP_NAME"]

    async def handler(ctx: JobContext) -> Any:
        event(event="start", id=ctx.id, token=ctx.token)
        try:
            await asyncio.sleep(ctx.payload.get("sleep_ms", 0) / 1000)
        except asyncio.CancelledError:
            event(event="cancelled", id=ctx.id)
            raise
        return {"by": name, "r": ctx.payload.get("result")}

    def on_done(d: Done) -> None:
        event(event="done", id=d.job["id"], outcome=d.outcome)

    client = Client(os.environ["WP_URL"], token=os.environ.get("WP_TOKEN") or None,
                    ca_file=os.environ.get("WP_CA_FILE") or None)
    start_ms = int(os.environ.get("WP_START_TIMEOUT_MS") or 0)
    prefetch = int(os.environ.get("WP_PREFETCH") or 0)
    w = Worker(client, handler, name=name, queues=[os.environ["WP_QUEUE"]],
               concurrency=4, lease=int(os.environ["WP_LEASE_MS"]) / 1000, wait=5, drain_timeout=10,
               on_done=on_done, start_timeout=start_ms / 1000 if start_ms else None, prefetch=prefetch)
    event(event="ready")
    await w.run(handle_signals=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:
        print(f"worker.py: {e}", file=sys.stderr)
        sys.exit(1)
