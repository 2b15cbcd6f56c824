// search-defaults.ts: what a search sends when it leaves out mode and threshold,
// and what it finds. Prints JSON (memsvc's tests compile it with `tsc --strict`,
// run it against a real server and check it).
//
//   MEMSVC_URL=http://127.0.0.1:8000 MEMSVC_API_KEY=sk_memsvc_... MEMSVC_BATCH=1 node search-defaults.js

import { createMemsvcClient } from "memsvc-client";
import type { SearchExplanation, SearchResult } from "memsvc-client";

const url = process.env.MEMSVC_URL ?? "http://127.0.0.1:8000";
const apiKey = process.env.MEMSVC_API_KEY;
const batch = process.env.MEMSVC_BATCH !== "0";

// Every procedure call that goes over the wire, with its input, in order.
const sent: Array<{ path: string; input: unknown }> = [];
const recording: typeof fetch = async (request, init) => {
  const target = new URL(request instanceof Request ? request.url : request);
  const paths = target.pathname.split("/").pop()!.split(",");
  const raw = init?.body ?? target.searchParams.get("input");
  const inputs = typeof raw === "string" ? JSON.parse(raw) : undefined;
  paths.forEach((path, i) => sent.push({ path, input: target.searchParams.has("batch") ? inputs?.[i] : inputs }));
  return fetch(request, init);
};

const memsvc = createMemsvcClient({ url, apiKey, batch, fetch: recording });
const semanticByDefault = createMemsvcClient({ url, apiKey, batch, fetch: recording, defaultMode: "semantic" });

const userId = `ts-defaults-${batch ? "batch" : "single"}-${Date.now()}`;
const bees = await memsvc.memory.add.mutate({ userId, content: "Dan keeps bees in his garden" });
const budget = await memsvc.memory.add.mutate({
  userId,
  content: "The quarterly budget review moved to Thursday and the projections need a second pass; bring the zebra folder",
});
sent.length = 0;

const brief = (found: SearchResult[]) => found.map((m) => ({ id: m.id, similarity: m.similarity, matchedBy: m.matchedBy }));

// Made in the same tick: the first asks service.info once for all of them.
const [natural, strict, keyword, hybrid] = await Promise.all([
  memsvc.memory.search.query({ userId, query: "Does Dan have any pets?" }),
  memsvc.memory.search.query({ userId, query: "Does Dan have any pets?", threshold: 0.7 }),
  memsvc.memory.search.query({ userId, query: "zebra", mode: "keyword" }),
  memsvc.memory.search.query({ userId, query: "zebra" }),
]);
const explained = await memsvc.memory.search.query({ userId, query: "Does Dan have any pets?", explain: true });
const semantic = await memsvc.memory.search.query({ userId, query: "Does Dan have any pets?", mode: "semantic" });
const otherDefault = await semanticByDefault.memory.search.query({ userId, query: "Does Dan have any pets?" });
const why: SearchExplanation | undefined = explained[0]?.explain;

await memsvc.memory.deleteAll.mutate({ userId });

console.log(
  JSON.stringify({
    ids: { bees: bees.id, budget: budget.id },
    natural: brief(natural),
    strict: brief(strict),
    keyword: brief(keyword),
    hybrid: brief(hybrid),
    explained: { ...brief(explained)[0], explain: why },
    semantic: brief(semantic),
    otherDefault: brief(otherDefault),
    sent: sent.filter((call) => call.path !== "memory.deleteAll"),
  }),
);
