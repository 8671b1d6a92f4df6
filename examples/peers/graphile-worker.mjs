// graphile-worker on PostgreSQL, as a user would run it: N trivial jobs added with
// WorkerUtils.addJobs, then one `run` (concurrency C, a no-op task) until every job
// has completed.
//
//   node graphile-worker.mjs postgres://USER:PASSWORD@HOST:PORT/DB JOBS CONCURRENCY
//
// Prints one line of key=value pairs (rates in jobs per second). Each run uses a
// schema of its own (migrated before any timing) and drops it at the end.

import { Logger, makeWorkerUtils, run } from "graphile-worker";
import { EventEmitter } from "node:events";
import { createRequire } from "node:module";

const [connectionString, jobsArg, concurrencyArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
if (!connectionString || !(jobs > 0) || !(concurrency > 0)) {
  console.error(
    "usage: node graphile-worker.mjs postgres://USER:PASSWORD@HOST:PORT/DB JOBS CONCURRENCY",
  );
  process.exit(2);
}
const version = createRequire(import.meta.url)("graphile-worker/package.json").version;

const schema = `bench_${process.pid}_${Date.now()}`;
// graphile-worker warns when its pool (default 10) is smaller than the
// concurrency; a user follows the warning, so the pool matches the concurrency.
// Its default logger prints a line per job at INFO: only warnings and errors are
// kept (on stderr), so that the figures measure the queue, not the console.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile-worker] ${level}: ${message}`);
});
const shared = { connectionString, schema, maxPoolSize: concurrency, logger };
const utils = await makeWorkerUtils(shared);
await utils.migrate();

const specs = Array.from({ length: jobs }, () => ({ identifier: "noop", payload: {} }));
let start = performance.now();
await utils.addJobs(specs);
const enqueueS = (performance.now() - start) / 1000;

let done = 0;
let failed = 0;
let finished;
const allDone = new Promise((resolve) => (finished = resolve));
// The listeners are on before the runner starts: no completion goes unseen.
const events = new EventEmitter();
events.on("job:success", () => {
  done += 1;
  if (done + failed === jobs) finished(performance.now());
});
events.on("job:failed", () => {
  failed += 1;
  if (done + failed === jobs) finished(performance.now());
});
start = performance.now();
const runner = await run({
  ...shared,
  events,
  concurrency,
  noHandleSignals: true,
  taskList: { noop: async () => {} },
});
const end = await allDone;
const processS = (end - start) / 1000;

await runner.stop();
await utils.withPgClient((client) => client.query(`drop schema "${schema}" cascade`));
await utils.release();

console.log(
  [
    "peer=graphile-worker",
    `version=${version}`,
    `jobs=${jobs}`,
    `concurrency=${concurrency}`,
    `enqueue_s=${enqueueS.toFixed(4)}`,
    `enqueue_per_s=${(jobs / enqueueS).toFixed(1)}`,
    `process_s=${processS.toFixed(4)}`,
    `process_per_s=${(done / processS).toFixed(1)}`,
    `failed=${failed}`,
  ].join(" "),
);
