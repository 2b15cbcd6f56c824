// jobs.ts: extraction jobs through the typed client, against a server with a
// language model (MEMSVC_LLM_URL). memsvc's tests run it against a fake model
// that answers each user message with the fact "The user said: <text>", and
// whose answer is the rest of a message line starting "FAKE:" (a broken one).
//
//   MEMSVC_URL=http://127.0.0.1:8000 MEMSVC_API_KEY=sk_memsvc_... node jobs.js

import { randomUUID } from "node:crypto";

import { createMemsvcClient, JobTimeoutError, TRPCClientError, waitForJob } from "memsvc-client";
import type { AppRouter, Job } from "memsvc-client";

const memsvc = createMemsvcClient({
  url: process.env.MEMSVC_URL ?? "http://127.0.0.1:8000",
  apiKey: process.env.MEMSVC_API_KEY,
});
const userId = `ts-jobs-${Date.now()}`;

async function said(text: string): Promise<Job> {
  const out = await memsvc.memory.ingest.mutate({
    userId,
    sessionId: "chat",
    messages: [{ role: "user", content: text, id: randomUUID() }],
    extract: true,
  });
  if (!out.job) throw new Error("an ingest with extract answers its job");
  return out.job;
}

// Queued at once; done when the model has answered and its fact is stored.
const queued = await said("I live in Porto");
const done = await waitForJob(memsvc, queued.id, { timeout: 60, interval: 0.2 });
const facts = await memsvc.memory.getAll.query({ userId, kinds: ["fact"] });

// Not settled in time: thrown with the job as last seen; it goes on regardless.
const slow = await said("I play the cello");
let timedOut: { name: string; status: string; timeout: number } | undefined;
try {
  await waitForJob(memsvc, slow.id, { timeout: 0.2, interval: 0.05 });
} catch (err) {
  if (!(err instanceof JobTimeoutError)) throw err;
  timedOut = { name: err.name, status: err.job.status, timeout: err.timeout };
}
const slowDone = await waitForJob(memsvc, slow.id, { timeout: 60 });

// A broken answer fails the job; retryJob queues it again.
const broken = await said("FAKE: this is not JSON");
const failed = await waitForJob(memsvc, broken.id, { timeout: 60 });
const retried = await memsvc.memory.retryJob.mutate({ id: failed.id });
const failedAgain = await waitForJob(memsvc, broken.id, { timeout: 60 });

// Newest first, a page at a time: the cursor is the last job's id.
const first = await memsvc.memory.jobs.query({ userId, limit: 2 });
const rest = await memsvc.memory.jobs.query({ userId, limit: 2, cursor: first[first.length - 1]!.id });
const failedOnly = await memsvc.memory.jobs.query({ userId, status: "failed" });

let notFound: { code: string; httpStatus: number; path: string | undefined } | undefined;
try {
  await memsvc.memory.job.query({ id: randomUUID() });
} catch (err) {
  if (!(err instanceof TRPCClientError)) throw err;
  const e = err as TRPCClientError<AppRouter>;
  notFound = { code: e.data?.code ?? "none", httpStatus: e.data?.httpStatus ?? 0, path: e.data?.path };
}

console.log(
  JSON.stringify({
    queued: { status: queued.status, attempts: queued.attempts },
    done: { status: done.status, attempts: done.attempts, added: done.facts?.added ?? [], usage: done.usage !== undefined },
    facts: facts.map((m) => [m.id, m.content, m.sources ?? []]),
    messages: (await memsvc.memory.getAll.query({ userId, kinds: ["message"] })).map((m) => [m.id, m.content]),
    timedOut,
    slowDone: slowDone.status,
    failed: { status: failed.status, attempts: failed.attempts, error: failed.error !== undefined },
    retried: { id: retried.id === failed.id, status: retried.status, attempts: retried.attempts },
    failedAgain: { status: failedAgain.status, attempts: failedAgain.attempts },
    ids: { queued: queued.id, slow: slow.id, broken: broken.id },
    pages: [first.map((j) => j.id), rest.map((j) => j.id)],
    failedOnly: failedOnly.map((j) => j.id),
    notFound,
  }),
);
