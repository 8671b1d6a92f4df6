// BullMQ on Redis, as a user would run it: N trivial jobs added with Queue.addBulk,
// then one Worker (concurrency C, a no-op processor) until every job has completed.
//
//   node bullmq.mjs redis://HOST:PORT JOBS CONCURRENCY
//
// Prints one line of key=value pairs (rates in jobs per second). The queue is
// obliterated at the end; each run uses a queue of its own name.

import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import { createRequire } from "node:module";

const [url, jobsArg, concurrencyArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
if (!url || !(jobs > 0) || !(concurrency > 0)) {
  console.error("usage: node bullmq.mjs redis://HOST:PORT JOBS CONCURRENCY");
  process.exit(2);
}
const version = createRequire(import.meta.url)("bullmq/package.json").version;

// BullMQ asks for maxRetriesPerRequest: null on the connections it blocks on.
const connection = new Redis(url, { maxRetriesPerRequest: null });
const name = `bench-${process.pid}-${Date.now()}`;
const queue = new Queue(name, { connection });
await queue.waitUntilReady();

const specs = Array.from({ length: jobs }, () => ({ name: "job", data: {} }));
let start = performance.now();
await queue.addBulk(specs);
const enqueueS = (performance.now() - start) / 1000;

let done = 0;
let failed = 0;
let finished;
const allDone = new Promise((resolve) => (finished = resolve));
start = performance.now();
const worker = new Worker(name, async () => {}, { connection, concurrency });
worker.on("completed", () => {
  done += 1;
  if (done + failed === jobs) finished(performance.now());
});
worker.on("failed", () => {
  failed += 1;
  if (done + failed === jobs) finished(performance.now());
});
const end = await allDone;
const processS = (end - start) / 1000;

await worker.close();
await queue.obliterate({ force: true });
await queue.close();
await connection.quit();

console.log(
  [
    "peer=bullmq",
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
