// ai-quickstart.ts: MEMSVC_API_KEY=sk_memsvc_... node ai-quickstart.js
import { createMemsvcClient } from "memsvc-client";
import { memsvcTools } from "memsvc-client/ai";

const memsvc = createMemsvcClient({
  url: process.env.MEMSVC_URL ?? "http://127.0.0.1:8000",
  apiKey: process.env.MEMSVC_API_KEY,
});
// Erin's memories as tools: give them to generateText({ model, tools, ... }).
const tools = memsvcTools({ client: memsvc, userId: "erin" });

// What the AI SDK runs when the model calls them:
const call = { toolCallId: "call-1", messages: [] };
await tools.addMemory.execute({ content: "Erin is vegetarian and loves Thai food" }, call);
const found = await tools.searchMemories.execute({ query: "Where should I take Erin for dinner?" }, call);
console.log(found.map((m) => `${m.content} (${m.similarity?.toFixed(2)})`));
await memsvc.memory.deleteAll.mutate({ userId: "erin" });
