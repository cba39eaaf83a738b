// fenceq for Node: a Client over the API's generated types (src/schema.ts,
// written by openapi-typescript from api/openapi.json) and a Worker that
// claims, heartbeats every third of the lease with the claim's fencing
// token, aborts a handler whose claim is lost, and completes or fails with
// the token. Its behaviour follows the Go Worker (api/client/worker.go).
// No runtime dependencies: Node's fetch.

import { hostname } from "node:os";
import type { components, operations } from "./schema.js";

export type { components, operations, paths } from "./schema.js";
type S = components["schemas"];
export type Job = S["Job"];
export type EnqueueRequest = S["EnqueueRequest"];
export type ClaimRequest = S["ClaimRequest"];
export type HeartbeatRequest = S["HeartbeatRequest"];
export type CompleteRequest = S["CompleteRequest"];
export type FailRequest = S["FailRequest"];
export type CompletedJob = S["CompletedJob"];
export type ErrorCode = S["ErrorCode"];

/** The server answered with an error: its status, stable code and message. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly operation: string,
  ) {
    super(`fenceq: ${operation}: ${status} ${code}: ${message}`);
    this.name = "APIError";
  }
  /** 404 and 409 on a fenced call: the claim is no longer this worker's. */
  get claimLost(): boolean {
    return this.status === 404 || this.status === 409;
  }
  /** The server could not decide (5xx, 429, 408): the same call may be sent again. */
  get transient(): boolean {
    return this.status >= 500 || this.status === 408 || this.status === 429;
  }
}

/** No answer: the server could not be reached or the reply was cut off. */
export class TransportError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TransportError";
  }
}

/** The claim is no longer this worker's; the job must not be completed. */
export class ClaimLost extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClaimLost";
  }
}

/** Throw from a handler to choose how the job fails. */
export class Failure extends Error {
  constructor(
    message: string,
    readonly options: { retryAfterMs?: number; final?: boolean } = {},
  ) {
    super(message);
    this.name = "Failure";
  }
}

function isTransient(err: unknown): boolean {
  return err instanceof TransportError || (err instanceof APIError && err.transient);
}

export interface ClientOptions {
  /** A bearer token of a principal with the needed role. */
  token?: string;
  /** Timeout of each call, in ms (a claim adds its wait). Default 10000. */
  timeoutMs?: number;
}

/** A fenceq server at baseUrl ("http://127.0.0.1:7420"). */
export class Client {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;

  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.headers = { Accept: "application/json" };
    if (options.token) this.headers["Authorization"] = `Bearer ${options.token}`;
    this.timeoutMs = options.timeoutMs ?? 10000;
  }

  /** Send a request; an error status throws APIError, no answer TransportError. */
  async call(
    operation: keyof operations,
    method: string,
    path: string,
    body?: unknown,
    opts: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<{ status: number; body: unknown }> {
    // One controller per call for the timeout and the caller's signal: not
    // AbortSignal.any, whose signals a long-lived source (the worker's
    // stop) keeps alive.
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new DOMException("the call timed out", "TimeoutError")), opts.timeoutMs ?? this.timeoutMs);
    const onAbort = () => ctl.abort(opts.signal?.reason);
    if (opts.signal?.aborted) onAbort();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    const signal = ctl.signal;
    const headers = { ...this.headers };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res: Response;
    let text: string;
    try {
      res = await fetch(this.baseUrl + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
      text = await res.text();
    } catch (e) {
      if (opts.signal?.aborted) throw e;
      throw new TransportError(`fenceq: ${operation}: cannot reach ${this.baseUrl}: ${String((e as Error).cause ?? e)}`, {
        cause: e,
      });
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
    }
    let decoded: unknown = undefined;
    if (text) {
      try {
        decoded = JSON.parse(text);
      } catch {
        decoded = undefined;
      }
    }
    if (res.status >= 400) {
      const err = (decoded as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new APIError(res.status, err?.code ?? "", err?.message ?? text.slice(0, 200), operation);
    }
    return { status: res.status, body: decoded };
  }

  async enqueue(req: EnqueueRequest): Promise<Job> {
    return (await this.call("enqueue", "POST", "/v1/jobs", req)).body as Job;
  }

  async getJob(id: number): Promise<Job> {
    return (await this.call("getJob", "GET", `/v1/jobs/${id}`)).body as Job;
  }

  /** Claim with a long-poll; [] when nothing came within wait_ms. */
  async claim(req: ClaimRequest, signal?: AbortSignal): Promise<Job[]> {
    const wait = Math.min(req.wait_ms ?? 0, 60000);
    const r = await this.call("claim", "POST", "/v1/claim", req, { timeoutMs: this.timeoutMs + wait, signal });
    if (r.status === 204 || r.body === undefined) return [];
    if (req.max !== undefined) return (r.body as S["JobList"]).jobs;
    return [r.body as Job];
  }

  async heartbeat(id: number, req: HeartbeatRequest): Promise<Job> {
    return (await this.call("heartbeat", "POST", `/v1/jobs/${id}/heartbeat`, req)).body as Job;
  }

  async complete(id: number, req: CompleteRequest): Promise<CompletedJob> {
    return (await this.call("complete", "POST", `/v1/jobs/${id}/complete`, req)).body as CompletedJob;
  }

  async fail(id: number, req: FailRequest): Promise<Job> {
    return (await this.call("fail", "POST", `/v1/jobs/${id}/fail`, req)).body as Job;
  }

  /** Complete several claims in one call and one transaction (POST /v1/jobs/complete); each item is decided as complete() would be, and claim_next claims more jobs in the same transaction. */
  async completeMany(req: S["BatchCompleteRequest"]): Promise<S["BatchResult"]> {
    return (await this.call("completeBatch", "POST", "/v1/jobs/complete", req)).body as S["BatchResult"];
  }

  /** Fail several claims in one call and one transaction (POST /v1/jobs/fail). */
  async failMany(req: S["BatchFailRequest"]): Promise<S["BatchResult"]> {
    return (await this.call("failBatch", "POST", "/v1/jobs/fail", req)).body as S["BatchResult"];
  }

  async cancel(id: number): Promise<Job> {
    return (await this.call("cancel", "POST", `/v1/jobs/${id}/cancel`)).body as Job;
  }

  /** true while token is the job's current claim; false once it is not (409). */
  async check(id: number, token: number): Promise<boolean> {
    const req: S["CheckRequest"] = { fencing_token: token };
    try {
      const r = await this.call("checkJob", "POST", `/v1/jobs/${id}/check`, req);
      return (r.body as S["JobCheck"]).current === true;
    } catch (e) {
      if (e instanceof APIError && e.status === 409) return false;
      throw e;
    }
  }
}

/** What a handler gets besides the job. */
export interface JobContext {
  id: number;
  /** The claim's fencing token: hand it to the service your side effect lands in. */
  token: number;
  worker: string;
  /** Aborted when the claim is lost (reason ClaimLost) or a stopping worker's drain ran out. */
  signal: AbortSignal;
  /** Throws ClaimLost unless the claim is still current (POST /v1/jobs/{id}/check). */
  check(): Promise<void>;
}

export type Handler = (job: Job, ctx: JobContext) => Promise<unknown>;

export type Outcome = "completed" | "failed" | "lost" | "unknown";

export interface Done {
  job: Job;
  outcome: Outcome;
  error?: unknown;
  stored?: Job;
}

export interface WorkerOptions {
  /** The worker label; claims are held by principal|name. Default the host name. */
  name?: string;
  queues?: string[];
  /** Handlers running at once. Default 1. */
  concurrency?: number;
  /**
   * How many jobs the worker may hold claimed beyond its handlers, waiting
   * for one to free up: a free handler then starts one at once instead of
   * waiting for a claim, and each call carries more completions (for
   * short jobs, prefetch = concurrency drains faster). A waiting job's
   * lease is running (heartbeats keep it; one whose claim is lost is
   * reported lost at once, never run) and another worker cannot take it:
   * leave it 0 for long jobs. Jobs still waiting when a stop begins run
   * during the drain; those the drain deadline finds not started are
   * failed without running, to be retried at once (each claim counts as
   * an attempt). Default 0; negative throws.
   */
  prefetch?: number;
  /** Lease of each claim; heartbeats every third of it. Default 30000. */
  leaseMs?: number;
  /** Long-poll of each claim. Default 30000. */
  waitMs?: number;
  /** How long a stop lets running jobs finish before aborting them. Default 30000. */
  drainTimeoutMs?: number;
  /**
   * When the server has not answered any claim for this long since run()
   * began (a wrong URL, nothing listening), run() rejects with the
   * TransportError naming the URL. Default: keep trying.
   */
  startTimeoutMs?: number;
  onDone?: (d: Done) => void;
}

/** A handler's answer, waiting to be sent. */
interface Pending {
  job: Job;
  token: number;
  value: unknown;
  err: unknown; // undefined: completed
  failed: boolean;
  stopped: boolean; // cut short by the drain timeout
}

/** A claimed job the worker holds: waiting for a free handler (prefetch), running, or done. */
interface Held {
  job: Job;
  token: number;
  /** The handler's signal: aborted with a ClaimLost when the claim is lost, or with an Error when the drain deadline passed. */
  abort: AbortController;
  claimLost?: ClaimLost;
  lose: (err: ClaimLost) => void;
  beatStop: AbortController;
  beat: Promise<void>;
  state: "waiting" | "running" | "done";
}

const stoppedMessage = "fenceq: worker stopped before the job finished";

const MAX_BATCH = 1000; // the most jobs one batched call may carry

const codeStatus: Record<string, number> = {
  invalid_argument: 400, unauthenticated: 401, permission_denied: 403, not_found: 404,
  failed_precondition: 409, already_exists: 409, resource_exhausted: 413, unavailable: 503,
};

/** A refused item of a batch as the error the single call would have thrown. */
function itemError(r: S["BatchResult"]["results"][number], operation: string): APIError {
  const code = r.error?.code ?? "";
  return new APIError(codeStatus[code] ?? 500, code, r.error?.message ?? "an item with neither a job nor an error", `${operation} (job ${r.id})`);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });

/**
 * Runs handler on jobs claimed through client. A handler's returned value
 * completes the job; a throw fails it (see Failure). When a heartbeat is
 * refused its signal aborts and its outcome is dropped: nothing is reported.
 *
 * Outcomes go out in batches, as the Go Worker's do: one completion call
 * at a time carries every completion that came in meanwhile (POST
 * /v1/jobs/complete, each item with its own token and its own answer) and
 * claims replacements for the handlers it frees in the same transaction
 * (claim_next); failures go out the same way (POST /v1/jobs/fail).
 */
export class Worker {
  readonly name: string;
  private readonly queues: string[];
  private readonly concurrency: number;
  private readonly prefetch: number;
  private readonly leaseMs: number;
  private readonly waitMs: number;
  private readonly drainTimeoutMs: number;
  private readonly stopping = new AbortController();
  private hardStopped = false;
  private readonly jobAborts = new Set<AbortController>(); // the held jobs' signals
  private fatal: unknown = undefined;
  private busy = 0; // handlers running
  private queued: Held[] = []; // claimed, waiting for a free handler, in claim order
  private asked = 0; // jobs asked for by calls in flight
  private pending: Pending[] = [];
  private wakeUp: () => void = () => {};

  constructor(
    readonly client: Client,
    readonly handler: Handler,
    private readonly options: WorkerOptions = {},
  ) {
    this.name = options.name || hostname() || "worker";
    this.queues = options.queues ?? ["default"];
    this.concurrency = Math.max(1, options.concurrency ?? 1);
    this.prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(this.prefetch) || this.prefetch < 0) {
      throw new Error(`fenceq: worker prefetch ${this.prefetch} is not a whole number of 0 or more`);
    }
    this.leaseMs = options.leaseMs ?? 30000;
    if (this.leaseMs < 30) throw new Error(`fenceq: worker lease ${this.leaseMs} ms is too short to heartbeat`);
    this.waitMs = options.waitMs ?? 30000;
    this.drainTimeoutMs = options.drainTimeoutMs ?? 30000;
  }

  /** Stop claiming; run() drains the running jobs, then resolves. */
  stop(): void {
    this.stopping.abort();
    this.wakeUp();
  }

  /** Claim and run jobs until stop() (or SIGTERM/SIGINT with handleSignals). Rejects when the server refuses the claim itself, or never answered within startTimeoutMs. */
  async run(opts: { handleSignals?: boolean } = {}): Promise<void> {
    const onSignal = () => this.stop();
    if (opts.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      await this.loop();
    } finally {
      if (opts.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    if (this.fatal !== undefined) throw this.fatal;
  }

  /** Room for more claims: free handlers plus prefetch, less the jobs waiting and those asked for. */
  private free(): number {
    return this.concurrency + this.prefetch - this.busy - this.queued.length - this.asked;
  }

  /** Holds newly claimed jobs: each is heartbeated from now on, waits its turn, and starts on a free handler. */
  private start(jobs: Job[]): void {
    for (const job of jobs) {
      const token = job.fencing_token ?? job.attempts;
      const abort = new AbortController();
      const beatStop = new AbortController();
      const h: Held = { job, token, abort, beatStop, beat: Promise.resolve(), state: "waiting", lose: () => {} };
      h.lose = (err: ClaimLost) => {
        h.claimLost ??= err;
        abort.abort(err);
        if (h.state === "waiting") this.dropWaiting(h);
      };
      this.jobAborts.add(abort);
      if (this.hardStopped) abort.abort(new Error(stoppedMessage));
      h.beat = this.heartbeat(job.id, token, h.lose, beatStop.signal);
      this.queued.push(h);
    }
    this.runQueued();
  }

  /** Starts waiting jobs on the free handlers, in the order claimed (after the drain deadline: all of them, to be failed unstarted). */
  private runQueued(): void {
    while (this.queued.length > 0 && (this.busy < this.concurrency || this.hardStopped)) {
      const h = this.queued.shift()!;
      h.state = "running";
      this.busy++;
      void this.runJob(h).then((o) => {
        this.busy--;
        if (o) this.pending.push(o);
        this.runQueued();
        this.wakeUp();
      });
    }
  }

  /** A waiting job whose claim a heartbeat found lost: reported lost now, never run; its room is claimed again. */
  private dropWaiting(h: Held): void {
    h.state = "done";
    const i = this.queued.indexOf(h);
    if (i >= 0) this.queued.splice(i, 1);
    h.beatStop.abort();
    this.jobAborts.delete(h.abort);
    this.report({ job: h.job, outcome: "lost", error: h.claimLost });
    this.wakeUp();
  }

  /**
   * One loop owns the worker's state: one long-poll claim at a time for
   * the free handlers, one finish call at a time for the outcomes that
   * came in, and the drain.
   */
  private async loop(): Promise<void> {
    const stop = this.stopping.signal;
    let claim: Promise<void> | undefined;
    let finish: Promise<void> | undefined;
    let retryAt = 0;
    let pause = 100;
    let answered = false;
    const began = Date.now();
    let drainUntil: number | undefined;
    for (;;) {
      const stopping = stop.aborted;
      const now = Date.now();
      if (stopping && drainUntil === undefined) drainUntil = now + this.drainTimeoutMs;
      // Claim for free handlers unless a finish call is about to claim
      // replacements for them in its own transaction.
      if (!stopping && !claim && now >= retryAt && this.free() > 0 && !finish && this.pending.length === 0) {
        const n = this.free();
        this.asked += n;
        claim = this.client
          .claim({ worker: this.name, queues: this.queues, lease_ms: this.leaseMs, wait_ms: this.waitMs, max: n }, stop)
          .then(
            (jobs) => {
              answered = true;
              pause = 100;
              this.start(jobs); // even when stopping: they are claimed
            },
            (e: unknown) => {
              answered ||= e instanceof APIError;
              if (stop.aborted) return; // the long-poll is abandoned
              const startTimeout = this.options.startTimeoutMs;
              if (!answered && startTimeout !== undefined && Date.now() - began >= startTimeout) {
                this.fatal = new TransportError(
                  `fenceq: worker: no answer from ${this.client.baseUrl} within ${startTimeout} ms: ${(e as Error).message}`,
                  { cause: e },
                );
                this.stop();
              } else if (e instanceof APIError && !e.transient) {
                this.fatal = e;
                this.stop();
              } else {
                retryAt = Date.now() + pause;
                pause = Math.min(2 * pause, 5000);
              }
            },
          )
          .finally(() => {
            this.asked -= n;
            claim = undefined;
            this.wakeUp();
          });
      }
      if (!finish && this.pending.length > 0) {
        const batch = this.pending;
        this.pending = [];
        const completions = batch.filter((o) => !o.failed).length;
        // Replacements for the handlers this batch frees (and room for
        // prefetch), and no more: the bound on what a lost reply can
        // leave claimed.
        const n = stopping ? 0 : Math.max(0, Math.min(this.free(), completions + this.prefetch));
        this.asked += n;
        finish = this.finish(batch, n).then((next) => {
          this.asked -= n;
          finish = undefined;
          this.start(next);
          this.wakeUp();
        });
      }
      if (stopping && this.busy === 0 && this.queued.length === 0 && !claim && !finish && this.pending.length === 0) return;
      if (drainUntil !== undefined && now >= drainUntil && !this.hardStopped && (this.busy > 0 || this.queued.length > 0)) {
        this.hardStopped = true;
        for (const a of this.jobAborts) a.abort(new Error(stoppedMessage));
        this.runQueued(); // the waiting jobs are failed without running
        continue;
      }
      let wait: number | undefined;
      if (retryAt > now && !stopping) wait = retryAt - now;
      if (drainUntil !== undefined && !this.hardStopped) wait = Math.max(0, Math.min(wait ?? Infinity, drainUntil - now));
      await new Promise<void>((resolve) => {
        const t = wait === undefined ? undefined : setTimeout(resolve, wait);
        this.wakeUp = () => {
          clearTimeout(t);
          this.wakeUp = () => {};
          resolve();
        };
      });
    }
  }

  /** Runs the handler of a held job (its heartbeats began at the claim): undefined when the claim was lost (reported here), else the outcome to send. */
  private async runJob(h: Held): Promise<Pending | undefined> {
    const { job, token, abort } = h;
    const signal = abort.signal;
    const ctx: JobContext = {
      id: job.id,
      token,
      worker: this.name,
      signal,
      check: async () => {
        if (h.claimLost || !(await this.client.check(job.id, token))) {
          const err = h.claimLost ?? new ClaimLost(`fenceq: job ${job.id}: token ${token} is no longer the current claim`);
          h.lose(err);
          throw err;
        }
      },
    };
    let value: unknown;
    let err: unknown = undefined;
    let failed = false;
    if (signal.aborted) {
      // The drain deadline passed before it started: fail it without
      // running the handler (retried at once).
      err = new Error(`not started: ${(signal.reason as Error)?.message ?? stoppedMessage}`);
      failed = true;
    } else {
      const aborted = new Promise<never>((_, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason), { once: true }),
      );
      aborted.catch(() => {});
      try {
        value = await Promise.race([this.handler(job, ctx), aborted]);
      } catch (e) {
        err = e;
        failed = true;
      }
    }
    h.beatStop.abort();
    await h.beat;
    h.state = "done";
    this.jobAborts.delete(abort);
    if (h.claimLost || err instanceof ClaimLost) {
      this.report({ job, outcome: "lost", error: h.claimLost ?? err });
      return undefined;
    }
    if (!failed) {
      try {
        JSON.stringify(value ?? null);
      } catch (e) {
        err = new Error(`fenceq: the handler's result cannot be sent as JSON: ${(e as Error).message}`);
        failed = true;
      }
    }
    return { job, token, value: value ?? null, err, failed, stopped: this.hardStopped };
  }

  /** Sends a batch of outcomes (completions with claim_next for claimMax jobs, then failures), reports each job, returns the jobs claim_next claimed. Never throws. */
  private async finish(batch: Pending[], claimMax: number): Promise<Job[]> {
    const next: Job[] = [];
    const completes = batch.filter((o) => !o.failed);
    const fails = batch.filter((o) => o.failed);
    for (let i = 0; i < completes.length; i += MAX_BATCH) {
      const chunk = completes.slice(i, i + MAX_BATCH);
      const jobs = chunk.map((o) => ({ id: o.job.id, fencing_token: o.token, result: o.value }));
      let attempts = 0;
      const max = claimMax;
      claimMax = 0;
      let res: S["BatchResult"];
      try {
        res = await this.deliver(() => {
          // A repeat asks for no replacements: an applied first try must
          // not leave more claimed jobs nobody knows of.
          const claimNext: S["ClaimNext"] | undefined =
            attempts === 0 && max > 0 ? { queues: this.queues, lease_ms: this.leaseMs, max } : undefined;
          attempts++;
          const req: S["BatchCompleteRequest"] = claimNext ? { worker: this.name, jobs, claim_next: claimNext } : { worker: this.name, jobs };
          return this.client.completeMany(req);
        });
      } catch (e) {
        for (const o of chunk) this.undelivered(o, e);
        continue;
      }
      next.push(...(res.next_jobs ?? []));
      for (const [k, o] of chunk.entries()) {
        const r = res.results[k]!;
        if (r.job) {
          this.report({ job: o.job, outcome: "completed", stored: r.job });
          continue;
        }
        const e = itemError(r, "completeBatch");
        if (e.claimLost) {
          if (attempts > 1 && (await this.completedByUs(o.job.id, o.token))) {
            this.report({ job: o.job, outcome: "completed" }); // the first try was applied
          } else {
            this.report({ job: o.job, outcome: "lost", error: e });
          }
        } else if (e.transient) {
          this.undelivered(o, e);
        } else {
          // The server refuses the completion itself (a result too large):
          // fail the attempt rather than let it expire.
          fails.push({ ...o, err: e, failed: true });
        }
      }
    }
    for (let i = 0; i < fails.length; i += MAX_BATCH) {
      const chunk = fails.slice(i, i + MAX_BATCH);
      const jobs = chunk.map((o) => {
        const item: S["BatchFailRequest"]["jobs"][number] = {
          id: o.job.id,
          fencing_token: o.token,
          error: String((o.err as Error)?.message ?? o.err).slice(0, 4000),
        };
        if (o.err instanceof Failure) {
          if (o.err.options.retryAfterMs !== undefined) item.retry_delay_ms = o.err.options.retryAfterMs;
          if (o.err.options.final) item.final = true;
        } else if (o.stopped) {
          item.retry_delay_ms = 0; // stopped: another worker takes it at once
        }
        return item;
      });
      let res: S["BatchResult"];
      try {
        res = await this.deliver(() => this.client.failMany({ worker: this.name, jobs }));
      } catch (e) {
        for (const o of chunk) this.undelivered(o, e);
        continue;
      }
      for (const [k, o] of chunk.entries()) {
        const r = res.results[k]!;
        if (r.job) {
          this.report({ job: o.job, outcome: "failed", error: o.err, stored: r.job });
          continue;
        }
        const e = itemError(r, "failBatch");
        if (e.claimLost) this.report({ job: o.job, outcome: "lost", error: e });
        else this.undelivered(o, e);
      }
    }
    return next;
  }

  private undelivered(o: Pending, e: unknown): void {
    this.report({ job: o.job, outcome: e instanceof APIError && e.claimLost ? "lost" : "unknown", error: e });
  }

  /** Whether the job is completed by the claim with token: only its holder could complete it with its token. */
  private async completedByUs(id: number, token: number): Promise<boolean> {
    try {
      const j = await this.client.getJob(id);
      return j.state === "completed" && j.attempts === token;
    } catch {
      return false;
    }
  }

  /** Send call until it gets an answer, for at most max(lease, 5 s): fenced calls are safe to repeat. */
  private async deliver(call: () => Promise<S["BatchResult"]>): Promise<S["BatchResult"]> {
    const deadline = Date.now() + Math.max(this.leaseMs, 5000);
    let pause = 50;
    for (;;) {
      try {
        const res = await call();
        if (!Array.isArray(res?.results)) throw new TransportError("fenceq: a batch answer without results");
        return res;
      } catch (e) {
        if (!isTransient(e) || Date.now() + pause > deadline) throw e;
        await sleep(pause);
        pause = Math.min(2 * pause, 1000);
      }
    }
  }

  /** Every lease/3 until stop: a refusal, or a lease run out without an answer, aborts lost. */
  private async heartbeat(id: number, token: number, lose: (err: ClaimLost) => void, stop: AbortSignal): Promise<void> {
    let expires = Date.now() + this.leaseMs;
    for (;;) {
      await sleep(this.leaseMs / 3, stop);
      if (stop.aborted) return;
      try {
        await this.client.heartbeat(id, { worker: this.name, fencing_token: token, lease_ms: this.leaseMs });
        expires = Date.now() + this.leaseMs;
        continue;
      } catch (e) {
        if (e instanceof APIError && !e.transient) {
          lose(new ClaimLost(`fenceq: job ${id}: heartbeat refused: ${e.message}`));
          return;
        }
      }
      if (Date.now() >= expires) {
        lose(new ClaimLost(`fenceq: job ${id}: the lease ran out without a heartbeat`));
        return;
      }
    }
  }

  private report(d: Done): void {
    this.options.onDone?.(d);
  }
}
