// Calls every procedure of memsvc through the typed client and prints what it
// saw as JSON (memsvc's tests compile it with `tsc --strict` and check it).
//
//   MEMSVC_URL=http://127.0.0.1:8000 MEMSVC_API_KEY=sk_memsvc_... MEMSVC_TOKEN=<jwt> \
//   MEMSVC_BATCH=1 node every-procedure.js

import { createMemsvcClient, TRPCClientError } from "memsvc-client";
import type { AppRouter, Memory, SearchResult } from "memsvc-client";

const url = process.env.MEMSVC_URL ?? "http://127.0.0.1:8000";
const batch = process.env.MEMSVC_BATCH !== "0";
const memsvc = createMemsvcClient({ url, apiKey: process.env.MEMSVC_API_KEY, batch });
const admin = createMemsvcClient({ url, token: process.env.MEMSVC_TOKEN, batch });

const called: string[] = [];
async function call<T>(procedure: string, promise: Promise<T>): Promise<T> {
  called.push(procedure);
  return await promise;
}

type Failure = { code: string; httpStatus: number; path: string | undefined; message: string };
async function failure(procedure: string, promise: Promise<unknown>): Promise<Failure> {
  try {
    await call(procedure, promise);
  } catch (err) {
    if (!(err instanceof TRPCClientError)) throw err;
    const e = err as TRPCClientError<AppRouter>;
    return {
      code: e.data?.code ?? "none",
      httpStatus: e.data?.httpStatus ?? 0,
      path: e.data?.path,
      message: e.message,
    };
  }
  throw new Error(`${procedure} should have failed`);
}

const userId = `ts-${batch ? "batch" : "single"}-${Date.now()}`;
const nextYear = new Date(Date.now() + 365 * 24 * 3600 * 1000).toISOString();

const key = await call("keys.create", admin.keys.create.mutate({ name: "every procedure" }));
const keys = await call("keys.list", admin.keys.list.query());

const added: Memory = await call(
  "memory.add",
  memsvc.memory.add.mutate({
    userId,
    content: "Bob is training for the Berlin marathon",
    metadata: { topic: "sport", level: 3 },
    expiresAt: nextYear,
  }),
);
const again = await call(
  "memory.add",
  memsvc.memory.add.mutate({ userId, content: "Bob is training for the Berlin marathon", metadata: { level: 3, topic: "sport" }, dedupe: true }),
);
const other = await call("memory.add", memsvc.memory.add.mutate({ userId, content: "Bob's sister lives in Porto" }));
const users = await call("memory.users", memsvc.memory.users.query({ prefix: userId, limit: 10 }));

// Made in the same tick: with batch, one request carries all three.
const [found, page, byId] = await Promise.all([
  call(
    "memory.search",
    memsvc.memory.search.query({ userId, query: "Which race is Bob running?", threshold: 0, filter: { topic: "sport", level: { gte: 2 } } }),
  ),
  call("memory.getAll", memsvc.memory.getAll.query({ userId, limit: 1 })),
  call("memory.getById", memsvc.memory.getById.query({ id: added.id })),
]);
const nextPage = await call("memory.getAll", memsvc.memory.getAll.query({ userId, limit: 1, cursor: page[0].id }));
const best: SearchResult | undefined = found[0];

const updated = await call(
  "memory.update",
  memsvc.memory.update.mutate({ id: added.id, content: "Bob ran the Berlin marathon", metadata: null, expiresAt: null }),
);
const history = await call("memory.history", memsvc.memory.history.query({ id: added.id }));
const info = await call("service.info", memsvc.service.info.query());

const talk = [
  { role: "user" as const, name: "Bob", content: "I ran the Berlin marathon yesterday", at: "2026-09-28T18:00:00+02:00", id: "m1" },
  { role: "assistant" as const, content: "Congratulations! What was your time?", id: "m2" },
];
const ingested = await call("memory.ingest", memsvc.memory.ingest.mutate({ userId, sessionId: "berlin", messages: talk }));
const ingestedAgain = await call("memory.ingest", memsvc.memory.ingest.mutate({ userId, sessionId: "berlin", messages: talk }));
const sessions = await call("memory.sessions", memsvc.memory.sessions.query({ userId }));
const conversation: Memory[] = await call("memory.session", memsvc.memory.session.query({ userId, sessionId: "berlin" }));
// Without a language model no job is queued: none listed, any id unknown.
const jobs = await call("memory.jobs", memsvc.memory.jobs.query({ userId, limit: 10 }));
const jobNotFound = await failure("memory.job", memsvc.memory.job.query({ id: other.id }));
const retryNotFound = await failure("memory.retryJob", memsvc.memory.retryJob.mutate({ id: other.id }));

const deleted = await call("memory.delete", memsvc.memory.delete.mutate({ id: other.id }));
const notFound = await failure("memory.getById", memsvc.memory.getById.query({ id: other.id }));
const badRequest = await failure("memory.search", memsvc.memory.search.query({ userId, query: "x", limit: 1000 }));
const deletedAll = await call("memory.deleteAll", memsvc.memory.deleteAll.mutate({ userId }));
const limited = await call("keys.setLimits", admin.keys.setLimits.mutate({ id: key.id, rateLimit: 30 }));
const revoked = await call("keys.revoke", admin.keys.revoke.mutate({ id: key.id }));

console.log(
  JSON.stringify({
    called,
    key: { name: key.name, secretPrefix: key.secret.slice(0, 10), listed: keys.some((k) => k.id === key.id) },
    added,
    dedupedTo: again.id,
    best: best && { id: best.id, similarity: best.similarity },
    found: found.length,
    users: users.map((u) => [u.userId === userId, u.memories]),
    pages: [page.map((m) => m.id), nextPage.map((m) => m.id)],
    byId,
    updated,
    history: history.map((v) => [v.version, v.event]),
    info: { model: info.embedder.model, dimensions: info.embedder.dimensions, limit: info.defaults.limit },
    ingested: {
      sessionId: ingested.sessionId,
      positions: ingested.memories.map((m) => [m.position, m.role, m.speaker ?? null, m.kind]),
      duplicatesAgain: ingestedAgain.duplicates,
    },
    sessions: sessions.map((s) => [s.sessionId, s.messages]),
    conversation: conversation.map((m) => m.messageId),
    jobs: { listed: jobs.length, ingestJob: ingested.job ?? null, notFound: [jobNotFound.code, retryNotFound.code] },
    deleted,
    notFound,
    badRequest,
    deletedAll,
    limits: [limited.rateLimit, limited.concurrencyLimit],
    revoked,
  }),
);
