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
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? this.timeoutMs);
    const signal = opts.signal ? AbortSignal.any([timeout, opts.signal]) : timeout;
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
  /** Lease of each claim; heartbeats every third of it. Default 30000. */
  leaseMs?: number;
  /** Long-poll of each claim. Default 30000. */
  waitMs?: number;
  /** How long a stop lets running jobs finish before aborting them. Default 30000. */
  drainTimeoutMs?: number;
  onDone?: (d: Done) => void;
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
 */
export class Worker {
  readonly name: string;
  private readonly queues: string[];
  private readonly concurrency: number;
  private readonly leaseMs: number;
  private readonly waitMs: number;
  private readonly drainTimeoutMs: number;
  private readonly stopping = new AbortController();
  private readonly running = new Set<Promise<void>>();
  private readonly hardStop = new AbortController();
  private fatal: unknown = undefined;

  constructor(
    readonly client: Client,
    readonly handler: Handler,
    private readonly options: WorkerOptions = {},
  ) {
    this.name = options.name || hostname() || "worker";
    this.queues = options.queues ?? ["default"];
    this.concurrency = Math.max(1, options.concurrency ?? 1);
    this.leaseMs = options.leaseMs ?? 30000;
    if (this.leaseMs < 30) throw new Error(`fenceq: worker lease ${this.leaseMs} ms is too short to heartbeat`);
    this.waitMs = options.waitMs ?? 30000;
    this.drainTimeoutMs = options.drainTimeoutMs ?? 30000;
  }

  /** Stop claiming; run() drains the running jobs, then resolves. */
  stop(): void {
    this.stopping.abort();
  }

  /** Claim and run jobs until stop() (or SIGTERM/SIGINT with handleSignals). Rejects when the server refuses the claim itself. */
  async run(opts: { handleSignals?: boolean } = {}): Promise<void> {
    const onSignal = () => this.stop();
    if (opts.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      await this.claimLoop();
      await this.drain();
    } finally {
      if (opts.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    if (this.fatal !== undefined) throw this.fatal;
  }

  private async claimLoop(): Promise<void> {
    let pause = 100;
    const stop = this.stopping.signal;
    const stopped = new Promise<void>((r) => stop.addEventListener("abort", () => r(), { once: true }));
    while (!stop.aborted) {
      const free = this.concurrency - this.running.size;
      if (free <= 0) {
        await Promise.race([...this.running, stopped]); // one listener on stop, not one per wait
        continue;
      }
      let jobs: Job[];
      try {
        jobs = await this.client.claim(
          { worker: this.name, queues: this.queues, lease_ms: this.leaseMs, wait_ms: this.waitMs, max: free },
          stop,
        );
      } catch (e) {
        if (stop.aborted) break; // the long-poll is abandoned
        if (e instanceof APIError && !e.transient) {
          this.fatal = e;
          this.stop();
          break;
        }
        await sleep(pause, stop);
        pause = Math.min(2 * pause, 5000);
        continue;
      }
      pause = 100;
      for (const job of jobs) {
        const p: Promise<void> = this.runJob(job).finally(() => this.running.delete(p));
        this.running.add(p);
      }
    }
  }

  private async drain(): Promise<void> {
    if (this.running.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((r) => (timer = setTimeout(() => r(true), this.drainTimeoutMs)));
    const drained = Promise.all([...this.running]).then(() => false);
    if (await Promise.race([drained, timedOut])) {
      this.hardStop.abort(new Error("fenceq: worker stopped before the job finished"));
    }
    clearTimeout(timer);
    await Promise.all([...this.running]);
  }

  private async runJob(job: Job): Promise<void> {
    const token = job.fencing_token ?? job.attempts;
    const lost = new AbortController();
    const signal = AbortSignal.any([lost.signal, this.hardStop.signal]);
    const ctx: JobContext = {
      id: job.id,
      token,
      worker: this.name,
      signal,
      check: async () => {
        if (lost.signal.aborted || !(await this.client.check(job.id, token))) {
          const err = new ClaimLost(`fenceq: job ${job.id}: token ${token} is no longer the current claim`);
          lost.abort(err);
          throw err;
        }
      },
    };
    const beatStop = new AbortController();
    const beat = this.heartbeat(job.id, token, lost, beatStop.signal);
    let value: unknown;
    let err: unknown = undefined;
    const aborted = new Promise<never>((_, reject) =>
      signal.addEventListener("abort", () => reject(signal.reason), { once: true }),
    );
    aborted.catch(() => {});
    try {
      value = await Promise.race([this.handler(job, ctx), aborted]);
    } catch (e) {
      err = e;
    }
    beatStop.abort();
    await beat;
    if (lost.signal.aborted || err instanceof ClaimLost) {
      this.report({ job, outcome: "lost", error: lost.signal.reason ?? err });
      return;
    }
    try {
      if (err === undefined) {
        const req: CompleteRequest = { worker: this.name, fencing_token: token, result: value ?? null };
        const stored = await this.deliver(() => this.client.complete(job.id, req));
        this.report({ job, outcome: "completed", stored });
      } else {
        const req: FailRequest = { worker: this.name, fencing_token: token, error: String((err as Error)?.message ?? err).slice(0, 4000) };
        if (err instanceof Failure) {
          if (err.options.retryAfterMs !== undefined) req.retry_delay_ms = err.options.retryAfterMs;
          if (err.options.final) req.final = true;
        } else if (this.hardStop.signal.aborted) {
          req.retry_delay_ms = 0; // stopped: another worker takes it at once
        }
        const stored = await this.deliver(() => this.client.fail(job.id, req));
        this.report({ job, outcome: "failed", error: err, stored });
      }
    } catch (e) {
      this.report({ job, outcome: e instanceof APIError && e.claimLost ? "lost" : "unknown", error: e });
    }
  }

  /** Send call until it gets an answer, for at most max(lease, 5 s): fenced calls are safe to repeat. */
  private async deliver<T>(call: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + Math.max(this.leaseMs, 5000);
    let pause = 50;
    for (;;) {
      try {
        return await call();
      } catch (e) {
        if (!isTransient(e) || Date.now() + pause > deadline) throw e;
        await sleep(pause);
        pause = Math.min(2 * pause, 1000);
      }
    }
  }

  /** Every lease/3 until stop: a refusal, or a lease run out without an answer, aborts lost. */
  private async heartbeat(id: number, token: number, lost: AbortController, stop: AbortSignal): Promise<void> {
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
          lost.abort(new ClaimLost(`fenceq: job ${id}: heartbeat refused: ${e.message}`));
          return;
        }
      }
      if (Date.now() >= expires) {
        lost.abort(new ClaimLost(`fenceq: job ${id}: the lease ran out without a heartbeat`));
        return;
      }
    }
  }

  private report(d: Done): void {
    this.options.onDone?.(d);
  }
}
