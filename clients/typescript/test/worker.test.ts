// The TypeScript Client and Worker against the real binary ($FENCEQ_BIN, or built with go).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, openSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { APIError, Client, Failure, TransportError, Worker, type Done, type Job } from "../src/index.js";

const root = resolve(fileURLToPath(import.meta.url), "../../../../..");
let server: ChildProcess;
let base = "";

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), "fenceq-ts-"));
  let bin = process.env.FENCEQ_BIN ?? "";
  if (!bin) {
    bin = join(dir, "fenceq");
    execFileSync("go", ["build", "-o", bin, "."], { cwd: root, stdio: "inherit" });
  }
  const log = join(dir, "fenceq.log");
  const fd = openSync(log, "w");
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FENCEQ_")));
  server = spawn(bin, ["serve", "--db", join(dir, "q.db"), "--listen", "127.0.0.1:0"], { stdio: ["ignore", fd, fd], env });
  for (let i = 0; i < 500 && !base; i++) {
    const m = /msg="fenceq serving".* listen=(http:\/\/\S+)/.exec(readFileSync(log, "utf8"));
    if (m) base = m[1]!;
    else await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(base, "fenceq did not start: " + readFileSync(log, "utf8"));
});

after(() => {
  server?.kill("SIGTERM");
});

let n = 0;
const queue = () => `ts-${process.pid}-${++n}`;

test("client calls carry the token and a repeat is refused", async () => {
  const c = new Client(base);
  const q = queue();
  assert.deepEqual(await c.claim({ worker: "w", queues: [q], wait_ms: 50 }), []);
  const job = await c.enqueue({ queue: q, payload: { n: 1 } });
  const [claimed] = await c.claim({ worker: "w", queues: [q], lease_ms: 3000, wait_ms: 1000 });
  assert.equal(claimed!.id, job.id);
  assert.equal(claimed!.fencing_token, 1);
  await c.heartbeat(job.id, { worker: "w", fencing_token: 1, lease_ms: 3000 });
  assert.equal(await c.check(job.id, 1), true);
  assert.equal(await c.check(job.id, 2), false);
  await assert.rejects(c.complete(job.id, { worker: "w", fencing_token: 2, result: "stale" }), (e: unknown) => e instanceof APIError && e.status === 409 && e.claimLost);
  assert.equal((await c.getJob(job.id)).state, "claimed");
  const done = await c.complete(job.id, { worker: "w", fencing_token: 1, result: { ok: true } });
  assert.equal(done.state, "completed");
  await assert.rejects(c.complete(job.id, { worker: "w", fencing_token: 1, result: { ok: false } }), APIError);
  assert.deepEqual((await c.getJob(job.id)).result, { ok: true });
});

test("the worker completes jobs concurrently with their tokens", async () => {
  const c = new Client(base);
  const q = queue();
  const ids = new Set<number>();
  for (let i = 0; i < 12; i++) ids.add((await c.enqueue({ queue: q, payload: i })).id);
  let running = 0;
  let peak = 0;
  const dones: Done[] = [];
  const w: Worker = new Worker(
    c,
    async (job: Job, ctx) => {
      running++;
      peak = Math.max(peak, running);
      assert.equal(ctx.token, 1);
      await ctx.check();
      await new Promise((r) => setTimeout(r, 50));
      running--;
      return { double: (job.payload as number) * 2 };
    },
    { name: "ts", queues: [q], concurrency: 4, leaseMs: 5000, waitMs: 1000, onDone: (d) => { dones.push(d); if (dones.length === 12) w.stop(); } },
  );
  await w.run();
  assert.equal(peak, 4);
  assert.deepEqual(new Set(dones.map((d) => d.job.id)), ids);
  assert.ok(dones.every((d) => d.outcome === "completed"));
  for (const id of ids) {
    const j = await c.getJob(id);
    assert.equal(j.state, "completed");
    assert.deepEqual(j.result, { double: (j.payload as number) * 2 });
  }
});

test("a refused heartbeat aborts the handler's signal and nothing is reported", async () => {
  const c = new Client(base);
  const q = queue();
  const job = await c.enqueue({ queue: q });
  let started!: () => void;
  const isStarted = new Promise<void>((r) => (started = r));
  let abortedAt = 0;
  const dones: Done[] = [];
  const w: Worker = new Worker(
    c,
    async (_job, ctx) => {
      started();
      await new Promise<void>((r) => ctx.signal.addEventListener("abort", () => { abortedAt = Date.now(); r(); }));
      return "must not be stored";
    },
    { queues: [q], leaseMs: 600, waitMs: 1000, onDone: (d) => { dones.push(d); w.stop(); } },
  );
  const run = w.run();
  await isStarted;
  await c.cancel(job.id);
  const t0 = Date.now();
  await run;
  assert.ok(abortedAt > 0 && abortedAt - t0 < 600, `aborted ${abortedAt - t0} ms after the cancel`);
  assert.deepEqual(dones.map((d) => d.outcome), ["lost"]);
  const j = await c.getJob(job.id);
  assert.equal(j.state, "cancelled");
  assert.equal(j.result, undefined);
});

test("stop drains in-flight jobs, then fails the rest for another worker", async () => {
  const c = new Client(base);
  const q = queue();
  const quick = await c.enqueue({ queue: q, payload: "quick", priority: 1 });
  const slow = await c.enqueue({ queue: q, payload: "slow" });
  let started = 0;
  let both!: () => void;
  const bothStarted = new Promise<void>((r) => (both = r));
  const w = new Worker(
    c,
    async (job, ctx) => {
      if (++started === 2) both();
      await new Promise<void>((r, reject) => {
        const t = setTimeout(r, job.payload === "quick" ? 300 : 30000);
        ctx.signal.addEventListener("abort", () => { clearTimeout(t); reject(ctx.signal.reason); });
      });
      return job.payload;
    },
    { queues: [q], concurrency: 2, leaseMs: 3000, waitMs: 1000, drainTimeoutMs: 1000 },
  );
  const run = w.run();
  await bothStarted;
  w.stop();
  await run;
  assert.equal((await c.getJob(quick.id)).state, "completed");
  const s = await c.getJob(slow.id);
  assert.equal(s.state, "available");
  assert.equal(s.attempts, 1);
});

test("a failure carries final", async () => {
  const c = new Client(base);
  const q = queue();
  const job = await c.enqueue({ queue: q, max_attempts: 5 });
  const w: Worker = new Worker(c, async () => { throw new Failure("no good", { final: true }); }, { queues: [q], leaseMs: 2000, waitMs: 1000, onDone: () => w.stop() });
  await w.run();
  const j = await c.getJob(job.id);
  assert.equal(j.state, "dead");
  assert.equal(j.attempts, 1);
});

test("a refused claim stops the worker with a clear error; an unreachable server is named", async () => {
  const w = new Worker(new Client(base), async () => null, { queues: ["no spaces allowed"], waitMs: 1000 });
  await assert.rejects(w.run(), (e: unknown) => e instanceof APIError && e.status === 400 && e.code === "invalid_argument");
  await assert.rejects(new Client("http://127.0.0.1:9").getJob(1), (e: unknown) => e instanceof TransportError && /127\.0\.0\.1:9/.test(e.message));
});

/** Requests per route (all statuses) from the server's /metrics. */
async function routeCounts(): Promise<Map<string, number>> {
  const text = await (await fetch(base + "/metrics")).text();
  const counts = new Map<string, number>();
  for (const m of text.matchAll(/^fenceq_http_request_duration_seconds_count\{.*route="([^"]*)".*\} (\S+)$/gm)) {
    counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + Number(m[2]));
  }
  return counts;
}

test("completions go out in batches that claim the next jobs", async () => {
  const c = new Client(base);
  const q = queue();
  const ids = new Set<number>();
  for (let i = 0; i < 60; i++) ids.add((await c.enqueue({ queue: q, payload: i })).id);
  const before = await routeCounts();
  const dones: Done[] = [];
  const w: Worker = new Worker(c, async (job) => job.payload, {
    queues: [q], concurrency: 8, leaseMs: 5000, waitMs: 1000,
    onDone: (d) => { dones.push(d); if (dones.length === 60) w.stop(); },
  });
  await w.run();
  assert.deepEqual(new Set(dones.map((d) => d.job.id)), ids);
  assert.ok(dones.every((d) => d.outcome === "completed"));
  const after = await routeCounts();
  const delta = (route: string) => (after.get(route) ?? 0) - (before.get(route) ?? 0);
  // No completion went out alone; fewer batches and claims than jobs:
  // claim_next took the next jobs with the completions.
  assert.equal(delta("/v1/jobs/:id/complete"), 0);
  assert.ok(delta("/v1/jobs/complete") > 0 && delta("/v1/jobs/complete") < 60, `${delta("/v1/jobs/complete")} batches`);
  assert.ok(delta("/v1/claim") < 60, `${delta("/v1/claim")} claims`);
  for (const id of ids) assert.equal((await c.getJob(id)).state, "completed");
});

test("a worker whose server never answers stops naming the URL", async () => {
  const w = new Worker(new Client("http://127.0.0.1:9"), async () => null, { startTimeoutMs: 500, waitMs: 1000 });
  await assert.rejects(w.run(), (e: unknown) => e instanceof TransportError && /http:\/\/127\.0\.0\.1:9/.test(e.message));
});

test("a refused item of a batched completion is lost and the others complete", async () => {
  const c = new Client(base);
  const q = queue();
  const a = await c.enqueue({ queue: q, payload: "a" });
  const b = await c.enqueue({ queue: q, payload: "b" });
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let started = 0;
  const dones: Done[] = [];
  // A 30 s lease: no heartbeat comes before the batch, so only the
  // completion can find job a's claim gone.
  const w: Worker = new Worker(c, async (job) => { started++; await released; return job.payload; }, {
    queues: [q], concurrency: 2, leaseMs: 30000, waitMs: 1000,
    onDone: (d) => { dones.push(d); if (dones.length === 2) w.stop(); },
  });
  const run = w.run();
  while (started < 2) await new Promise((r) => setTimeout(r, 10));
  await c.cancel(a.id);
  release(); // both return at once: one batch
  await run;
  const outcomes = Object.fromEntries(dones.map((d) => [d.job.id, d.outcome]));
  assert.deepEqual(outcomes, { [a.id]: "lost", [b.id]: "completed" });
  const ja = await c.getJob(a.id);
  assert.equal(ja.state, "cancelled");
  assert.equal(ja.result, undefined);
  const jb = await c.getJob(b.id);
  assert.equal(jb.state, "completed");
  assert.equal(jb.result, "b");
});

test("a worker keeps no memory per finished job", async () => {
  const gc = (globalThis as { gc?: () => void }).gc;
  assert.ok(gc, "run with node --expose-gc (npm test does)");
  const c = new Client(base);
  const q = queue();
  const n = 4000;
  for (let i = 0; i < n; i += 1000) {
    await c.call("enqueue", "POST", "/v1/jobs", Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({ queue: q, payload: i + j })));
  }
  let done = 0;
  const settle = async () => {
    for (let i = 0; i < 3; i++) {
      gc();
      await new Promise((r) => setTimeout(r, 20));
    }
    return process.memoryUsage().heapUsed;
  };
  const before = await settle();
  const w: Worker = new Worker(c, async () => null, {
    queues: [q], concurrency: 16, leaseMs: 30000, waitMs: 1000, onDone: () => { if (++done === n) w.stop(); },
  });
  await w.run();
  const grown = (await settle()) - before;
  // Each job's abort signal once stayed tied to the worker's stop signal
  // (AbortSignal.any): 3 KiB a job, 13 MiB here.
  assert.ok(grown < 4 << 20, `the heap grew ${Math.round(grown / 1024)} KiB over ${n} jobs`);
});

/** Polls cond every 20 ms until it holds; fails after timeoutMs. */
async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function states(c: Client, ids: number[]): Promise<Job[]> {
  return Promise.all(ids.map((id) => c.getJob(id)));
}

const count = (jobs: Job[], state: string) => jobs.filter((j) => j.state === state).length;

test("prefetch holds that many claimed jobs beyond the handlers, heartbeated, and runs them as handlers free up", { timeout: 30000 }, async (t) => {
  const c = new Client(base);
  const q = queue();
  const ids: number[] = [];
  for (let i = 0; i < 8; i++) ids.push((await c.enqueue({ queue: q, payload: i })).id);
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let started = 0;
  let running = 0;
  let peak = 0;
  const dones: Done[] = [];
  const w: Worker = new Worker(
    c,
    async (job) => {
      started++;
      peak = Math.max(peak, ++running);
      await released;
      running--;
      return job.payload;
    },
    { queues: [q], concurrency: 2, prefetch: 3, leaseMs: 1000, waitMs: 1000, onDone: (d) => { dones.push(d); if (dones.length === 8) w.stop(); } },
  );
  const run = w.run();
  t.after(() => { release(); w.stop(); }); // a failed assertion leaves no worker behind
  await waitFor("5 claimed", async () => count(await states(c, ids), "claimed") === 5);
  await new Promise((r) => setTimeout(r, 200)); // no more claims come
  let js = await states(c, ids);
  assert.equal(count(js, "claimed"), 5);
  assert.equal(count(js, "available"), 3);
  assert.equal(started, 2);
  // More than a lease later the waiting jobs are still ours: heartbeated.
  await new Promise((r) => setTimeout(r, 1500));
  js = await states(c, ids);
  const claimed = js.filter((j) => j.state === "claimed");
  assert.equal(claimed.length, 5);
  for (const j of claimed) {
    assert.equal(j.attempts, 1);
    assert.ok(Date.parse(j.lease_expires_at!) > Date.now(), `job ${j.id}'s lease ran out at ${j.lease_expires_at}`);
  }
  assert.equal(started, 2);
  release();
  await run;
  assert.equal(dones.length, 8);
  assert.ok(dones.every((d) => d.outcome === "completed"), JSON.stringify(dones.map((d) => d.outcome)));
  for (const j of await states(c, ids)) {
    assert.equal(j.state, "completed");
    assert.equal(j.attempts, 1);
  }
  assert.equal(started, 8);
  assert.ok(peak <= 2, `${peak} handlers ran at once`);
});

test("a stop runs the waiting (prefetched) jobs during the drain", { timeout: 30000 }, async (t) => {
  const c = new Client(base);
  const q = queue();
  const ids: number[] = [];
  for (let i = 0; i < 4; i++) ids.push((await c.enqueue({ queue: q, payload: i })).id);
  let started = 0;
  const w = new Worker(
    c,
    async (job) => {
      started++;
      await new Promise((r) => setTimeout(r, 500));
      return job.payload;
    },
    { queues: [q], concurrency: 1, prefetch: 3, leaseMs: 3000, waitMs: 1000, drainTimeoutMs: 10000 },
  );
  const run = w.run();
  t.after(() => w.stop());
  await waitFor("4 claimed", async () => count(await states(c, ids), "claimed") === 4);
  w.stop();
  assert.ok(started < 4, `${started} started before the stop`);
  await run;
  assert.equal(started, 4);
  for (const j of await states(c, ids)) {
    assert.equal(j.state, "completed");
    assert.equal(j.attempts, 1);
  }
});

test("waiting jobs the drain deadline finds not started are failed without running, to be retried at once", { timeout: 30000 }, async (t) => {
  const c = new Client(base);
  const q = queue();
  const ids: number[] = [];
  for (let i = 0; i < 3; i++) ids.push((await c.enqueue({ queue: q, payload: i, max_attempts: 5 })).id);
  const ran: number[] = [];
  const w = new Worker(
    c,
    async (job, ctx) => {
      ran.push(job.id);
      await new Promise<void>((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason)));
    },
    { queues: [q], concurrency: 1, prefetch: 2, leaseMs: 3000, waitMs: 1000, drainTimeoutMs: 500 },
  );
  const run = w.run();
  t.after(() => w.stop());
  await waitFor("3 claimed", async () => count(await states(c, ids), "claimed") === 3);
  assert.equal(ran.length, 1);
  w.stop();
  await run;
  assert.equal(ran.length, 1, `handlers ran for ${ran}`);
  for (const j of await states(c, ids)) {
    assert.equal(j.attempts, 1);
    assert.ok(
      j.state === "available" || (j.state === "scheduled" && Math.abs(Date.parse(j.run_at) - Date.parse(j.updated_at)) < 100),
      `job ${j.id}: ${j.state}, run_at ${j.run_at}, updated_at ${j.updated_at}`,
    );
    assert.match(j.last_error ?? "", /worker stopped/);
  }
});

test("a waiting job whose claim is lost is reported lost at once, never run, and its room claimed again", { timeout: 30000 }, async (t) => {
  const c = new Client(base);
  const q = queue();
  const a = await c.enqueue({ queue: q, payload: "a", priority: 1 });
  const b = await c.enqueue({ queue: q, payload: "b" });
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let isReleased = false;
  const ran: unknown[] = [];
  const dones: Done[] = [];
  const w: Worker = new Worker(
    c,
    async (job) => {
      ran.push(job.payload);
      if (job.payload === "a") await released;
      return job.payload;
    },
    { queues: [q], concurrency: 1, prefetch: 1, leaseMs: 1000, waitMs: 1000, onDone: (d) => { dones.push(d); if (dones.length === 3) w.stop(); } },
  );
  const run = w.run();
  t.after(() => { release(); w.stop(); });
  await waitFor("both claimed", async () => count(await states(c, [a.id, b.id]), "claimed") === 2);
  assert.deepEqual(ran, ["a"]);
  await c.cancel(b.id);
  const t0 = Date.now();
  await waitFor("b reported lost", () => dones.some((d) => d.job.id === b.id), 3000);
  assert.ok(!isReleased);
  assert.deepEqual(dones.map((d) => [d.job.id, d.outcome]), [[b.id, "lost"]], `${Date.now() - t0} ms after the cancel`);
  // Its room is claimed again while a's handler still runs.
  const c2 = await c.enqueue({ queue: q, payload: "c" });
  await waitFor("c claimed", async () => (await c.getJob(c2.id)).state === "claimed", 3000);
  assert.deepEqual(ran, ["a"]);
  isReleased = true;
  release();
  await run;
  assert.deepEqual(ran, ["a", "c"]);
  assert.equal((await c.getJob(b.id)).state, "cancelled");
  assert.equal((await c.getJob(a.id)).state, "completed");
  assert.equal((await c.getJob(c2.id)).state, "completed");
});

test("a negative prefetch is refused", () => {
  assert.throws(() => new Worker(new Client(base), async () => null, { prefetch: -1 }), /prefetch/);
});
