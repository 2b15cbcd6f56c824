// quickstart.ts: MEMSVC_API_KEY=sk_memsvc_... node quickstart.js
import { createMemsvcClient, TRPCClientError } from "memsvc-client";
import type { AppRouter } from "memsvc-client";

const memsvc = createMemsvcClient({
  url: process.env.MEMSVC_URL ?? "http://127.0.0.1:8000",
  apiKey: process.env.MEMSVC_API_KEY,
});

const added = await memsvc.memory.add.mutate({ userId: "carol", content: "Carol likes jazz" });
// No mode, no threshold: hybrid, with the threshold service.info recommends for the model.
const found = await memsvc.memory.search.query({ userId: "carol", query: "What should I play at Carol's party?" });
console.log(found.map((m) => `${m.content} (${m.similarity.toFixed(2)})`));

await memsvc.memory.delete.mutate({ id: added.id });
try {
  await memsvc.memory.getById.query({ id: added.id });
} catch (err) {
  if (!(err instanceof TRPCClientError)) throw err;
  const { data } = err as TRPCClientError<AppRouter>;
  console.log(data?.code, data?.httpStatus); // NOT_FOUND 404
}
