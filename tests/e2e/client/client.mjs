// Drives memsvc with the unmodified @trpc/client (httpLink and httpBatchLink)
// and prints what it saw as JSON, for tests/e2e/test_trpc_client.py.
//
//   MEMSVC_URL=http://127.0.0.1:8000/trpc MEMSVC_API_KEY=sk_... MEMSVC_TOKEN=<jwt> node client.mjs

import { createTRPCClient, httpBatchLink, httpLink, TRPCClientError } from "@trpc/client";
import { memsvcFetch } from "./memsvc-fetch.mjs";

const url = process.env.MEMSVC_URL;
const apiKey = process.env.MEMSVC_API_KEY;
const MISSING = "00000000-0000-4000-8000-000000000000";

function client(link, { key = apiKey, shim = true } = {}) {
  return createTRPCClient({
    links: [link({ url, headers: () => ({ "x-api-key": key }), ...(shim ? { fetch: memsvcFetch } : {}) })],
  });
}

// A failed call as the client reports it.
async function failure(promise) {
  try {
    await promise;
    return { ok: true };
  } catch (err) {
    if (!(err instanceof TRPCClientError)) throw err;
    return {
      ok: false,
      message: err.message,
      code: err.data?.code ?? null,
      httpStatus: err.data?.httpStatus ?? null,
      path: err.data?.path ?? null,
      shape: err.shape ?? null,
    };
  }
}

async function scenario(name, link) {
  const c = client(link);
  const userId = `e2e-${name}-${Date.now()}`;
  const out = {};
  out.add = await c.memory.add.mutate({ userId, content: `I like green tea (${name})`, metadata: { via: name } });
  out.second = await c.memory.add.mutate({ userId, content: "My sister lives in Porto" });
  out.getAll = await c.memory.getAll.query({ userId });
  out.search = await c.memory.search.query({ userId, query: `I like green tea (${name})`, threshold: 0 });
  // Calls made in the same tick: httpBatchLink merges them into one request.
  out.together = await Promise.all([
    c.memory.getById.query({ id: out.add.id }),
    c.memory.getById.query({ id: out.second.id }),
    c.memory.getAll.query({ userId, limit: 1 }),
  ]);
  out.mixed = await Promise.all([
    c.memory.getById.query({ id: out.add.id }).then((m) => ({ ok: true, id: m.id })),
    failure(c.memory.getById.query({ id: MISSING })),
  ]);
  out.notFound = await failure(c.memory.getById.query({ id: MISSING }));
  out.badRequest = await failure(c.memory.add.mutate({ userId }));
  out.badLimit = await failure(c.memory.search.query({ userId, query: "x", limit: 101 }));
  out.unauthorized = await failure(client(link, { key: "sk_memsvc_wrong" }).memory.getAll.query({ userId }));
  out.delete = await c.memory.delete.mutate({ id: out.second.id });
  out.deleteAgain = await failure(c.memory.delete.mutate({ id: out.second.id }));
  out.afterDelete = await c.memory.getAll.query({ userId });
  out.withoutShim = await failure(client(link, { shim: false }).memory.getById.query({ id: MISSING }));
  out.successWithoutShim = await client(link, { shim: false }).memory.getAll.query({ userId, limit: 1 });
  return out;
}

// The key lifecycle: a tenant signed in with a JWT creates a key, uses it,
// lists it, revokes it, and the key stops working.
async function keysScenario(name, link) {
  const admin = createTRPCClient({
    links: [link({ url, headers: () => ({ authorization: `Bearer ${process.env.MEMSVC_TOKEN}` }), fetch: memsvcFetch })],
  });
  const out = {};
  out.created = await admin.keys.create.mutate({ name: `e2e ${name}` });
  const withKey = client(link, { key: out.created.secret });
  out.added = await withKey.memory.add.mutate({ userId: `keys-${name}`, content: "made with a fresh key" });
  out.listed = await admin.keys.list.query();
  out.revoked = await admin.keys.revoke.mutate({ id: out.created.id });
  out.revokedAgain = await admin.keys.revoke.mutate({ id: out.created.id });
  out.afterRevoke = await failure(withKey.memory.getAll.query({ userId: `keys-${name}` }));
  out.listedAfter = await admin.keys.list.query();
  out.noToken = await failure(client(link).keys.list.query());
  out.missing = await failure(admin.keys.revoke.mutate({ id: MISSING }));
  return out;
}

const result = {
  httpLink: await scenario("httpLink", httpLink),
  httpBatchLink: await scenario("httpBatchLink", httpBatchLink),
  keys: {
    httpLink: await keysScenario("httpLink", httpLink),
    httpBatchLink: await keysScenario("httpBatchLink", httpBatchLink),
  },
};
console.log(JSON.stringify(result));
