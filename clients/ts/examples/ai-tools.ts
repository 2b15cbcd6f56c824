// memsvcTools through the AI SDK's own generateText, a mock model making the
// tool calls (no model needed), and directly; prints what happened as JSON.
// MEMSVC_URL, MEMSVC_API_KEY, MEMSVC_OTHER_KEY (another tenant), MEMSVC_USER.
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { createMemsvcClient } from "memsvc-client";
import { memsvcTools } from "memsvc-client/ai";
import type { MemsvcTools } from "memsvc-client/ai";

const url = process.env.MEMSVC_URL ?? "http://127.0.0.1:8000";
const userId = process.env.MEMSVC_USER ?? "ai-user";
const memsvc = createMemsvcClient({ url, apiKey: process.env.MEMSVC_API_KEY });
const otherTenant = createMemsvcClient({ url, apiKey: process.env.MEMSVC_OTHER_KEY });

const BEES = "Dan keeps bees in his garden";
const PETS = "Does Dan have any pets?";
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model that calls one tool with `input`, then answers "done". */
function callsTool(toolName: keyof MemsvcTools, input: unknown): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    doGenerate: [
      {
        content: [{ type: "tool-call", toolCallId: "call-1", toolName, input: JSON.stringify(input) }],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      },
      {
        content: [{ type: "text", text: "done" }],
        finishReason: { unified: "stop", raw: undefined },
        usage,
        warnings: [],
      },
    ],
  });
}

async function run(toolName: keyof MemsvcTools, input: unknown, tools: MemsvcTools) {
  const result = await generateText({
    model: callsTool(toolName, input),
    tools,
    prompt: "Remember what matters.",
    stopWhen: stepCountIs(2),
  });
  const step = result.steps[0]!;
  return {
    results: step.toolResults.map((r) => r.output),
    errors: step.content.filter((part) => part.type === "tool-error").map((part) => String(part.error)),
    text: result.text,
  };
}

const tools = memsvcTools({ client: memsvc, userId, metadata: { source: "agent" } });
// Other end users' and tenants' memories, which must never come back.
await memsvc.memory.add.mutate({ userId: `${userId}-other`, content: BEES });
await otherTenant.memory.add.mutate({ userId, content: BEES });

const added = await run("addMemory", { content: BEES }, tools);
const again = await run("addMemory", { content: BEES }, tools);
const searched = await run("searchMemories", { query: PETS }, tools);
const invalid = await run("searchMemories", { query: "" }, tools);
const call = { toolCallId: "call-2", messages: [] };
const direct = await tools.searchMemories.execute({ query: PETS }, call);
const everything = memsvcTools({ client: memsvc, userId, threshold: 0, limit: 100 });
const all = await everything.searchMemories.execute({ query: PETS }, call);
const strict = memsvcTools({ client: memsvc, userId, threshold: 0.7 });
const none = await strict.searchMemories.execute({ query: PETS }, call);
const stored = await memsvc.memory.getAll.query({ userId });

console.log(
  JSON.stringify({
    added,
    again,
    searched,
    invalid,
    direct,
    all,
    none,
    stored: stored.map((m) => ({ id: m.id, content: m.content, metadata: m.metadata })),
    schemas: {
      searchMemories: Object.keys(tools.searchMemories).sort(),
      description: tools.searchMemories.description,
    },
  }),
);
await memsvc.memory.deleteAll.mutate({ userId });
await memsvc.memory.deleteAll.mutate({ userId: `${userId}-other` });
await otherTenant.memory.deleteAll.mutate({ userId });
