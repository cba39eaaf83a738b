// The TypeScript Worker as the worker-protocol suite drives it
// (e2e/workerprotocol_test.go): clients/typescript built into its dist/.
// Env: WP_URL, WP_QUEUE, WP_NAME, WP_LEASE_MS; optional: WP_TOKEN,
// WP_START_TIMEOUT_MS (give up on a server that never answers), WP_PREFETCH
// (the Worker's prefetch, default 0); over https
// Node trusts the CA file in NODE_EXTRA_CA_CERTS. Each job's payload is
// {"sleep_ms": N, "result": R}: the handler sleeps N ms and returns
// {"by": WP_NAME, "r": R}. Events go to stdout, one JSON object a line:
// start (id, token), cancelled (id), done (id, outcome). SIGTERM drains.
import { Client, Worker } from "../../../clients/typescript/dist/src/index.js";

const event = (e) => process.stdout.write(JSON.stringify(e) + "\n");
const name = process.env.WP_NAME;

const handler = (job, ctx) =>
  new Promise((resolve, reject) => {
    event({ event: "start", id: job.id, token: ctx.token });
    const t = setTimeout(() => resolve({ by: name, r: job.payload?.result }), job.payload?.sleep_ms ?? 0);
    ctx.signal.addEventListener("abort", () => {
      clearTimeout(t);
      event({ event: "cancelled", id: job.id });
      reject(ctx.signal.reason);
    });
  });

const w = new Worker(new Client(process.env.WP_URL, { token: process.env.WP_TOKEN }), handler, {
  name,
  queues: [process.env.WP_QUEUE],
  concurrency: 4,
  prefetch: Number(process.env.WP_PREFETCH) || 0,
  leaseMs: Number(process.env.WP_LEASE_MS),
  waitMs: 5000,
  drainTimeoutMs: 10000,
  startTimeoutMs: Number(process.env.WP_START_TIMEOUT_MS) || undefined,
  onDone: (d) => event({ event: "done", id: d.job.id, outcome: d.outcome }),
});
event({ event: "ready" });
try {
  await w.run({ handleSignals: true });
} catch (e) {
  process.stderr.write(`worker.mjs: ${e.message}\n`);
  process.exit(1);
}
