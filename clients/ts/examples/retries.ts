// retries.ts: a key allowed one call at a time, ten adds at once; every one lands.
import { createMemsvcClient } from "memsvc-client";

const memsvc = createMemsvcClient({
  url: process.env.MEMSVC_URL ?? "http://127.0.0.1:8000",
  apiKey: process.env.MEMSVC_API_KEY,
  batch: false, // ten requests, not one batch
  maxRetries: 20,
});

const added = await Promise.all(
  Array.from({ length: 10 }, (_, i) =>
    memsvc.memory.add.mutate({ userId: "dora", content: `Dora's note number ${i}` }),
  ),
);
const listed = await memsvc.memory.getAll.query({ userId: "dora", limit: 100 });
console.log(JSON.stringify({ added: added.length, stored: listed.length }));
