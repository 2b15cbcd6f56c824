// memsvc-client/ai: an end user's memories as tools for the Vercel AI SDK.
//
// `import { memsvcTools } from "memsvc-client/ai"` needs the `ai` and `zod`
// packages (optional peer dependencies); `import ... from "memsvc-client"`
// never loads them. The tools are the AI SDK's own (`tool()` with zod
// schemas), over memsvc's own client: each call is one memory.search or
// memory.add, for the end user the application names.

import { tool } from "ai";
import type { Tool, ToolExecutionOptions } from "ai";
import { z } from "zod";

import type { MemsvcClient } from "./index.js";
import type { Filter, Memory, SearchResult } from "./generated.js";
import type { SearchMode } from "./search.js";

export interface MemsvcToolsOptions {
  /** memsvc's client (`createMemsvcClient`). */
  client: MemsvcClient;
  /** The end user the memories belong to: the application's choice, never the model's. */
  userId: string;
  /** How many memories a search returns at most (1 to 100). Default: 5. */
  limit?: number | undefined;
  /** The mode of every search. Default: the client's (hybrid unless set). */
  mode?: SearchMode | undefined;
  /** A floor on similarity. Default: the deployment's recommended threshold (keyword: none). */
  threshold?: number | undefined;
  /** memsvc's metadata filter on every search, e.g. `{ kind: "preference" }`. */
  filter?: Filter | undefined;
  /** Stored with every memory `addMemory` adds. */
  metadata?: Record<string, unknown> | undefined;
}

/** A memory as the tools show it to the model: what it says, no empty fields. */
export interface ShownMemory {
  id: string;
  content: string;
  /** Cosine similarity to the query, rounded to 4 places (search results only). */
  similarity?: number;
  metadata?: Record<string, unknown>;
  createdAt: string;
}

/** The input of `searchMemories`, as the model sends it. */
export const searchMemoriesInput = z.object({
  query: z.string().min(1).describe("What to look for, in natural language: a question or a topic."),
});

/** The input of `addMemory`, as the model sends it. */
export const addMemoryInput = z.object({
  content: z
    .string()
    .min(1)
    .describe('One self-contained statement, e.g. "Maya is allergic to peanuts".'),
});

/**
 * An AI SDK tool whose `execute` is always there and answers a promise of its
 * output, so the application can call it too: `await tools.searchMemories.execute(...)`.
 */
export type MemsvcTool<INPUT, OUTPUT> = {
  execute: (input: INPUT, options: ToolExecutionOptions) => Promise<OUTPUT>;
} & Tool<INPUT, OUTPUT>;

/** The tools, a `ToolSet` for `generateText({ tools })` (a type, so that it is one). */
export type MemsvcTools = {
  /** Search what is remembered about the user, best match first. */
  searchMemories: MemsvcTool<z.infer<typeof searchMemoriesInput>, ShownMemory[]>;
  /** Remember something lasting about the user (an identical memory is stored once). */
  addMemory: MemsvcTool<z.infer<typeof addMemoryInput>, ShownMemory>;
};

function shown(memory: Memory | SearchResult): ShownMemory {
  const out: ShownMemory = { id: memory.id, content: memory.content, createdAt: memory.createdAt };
  if ("similarity" in memory) out.similarity = Math.round(memory.similarity * 1e4) / 1e4;
  if (Object.keys(memory.metadata).length > 0) out.metadata = memory.metadata;
  return out;
}

/**
 * `searchMemories` and `addMemory` for one end user, for `generateText({ tools })`
 * and `streamText({ tools })`. Errors (a `TRPCClientError` with memsvc's message)
 * reach the SDK as the tool's error.
 */
export function memsvcTools(options: MemsvcToolsOptions): MemsvcTools {
  const { client, userId } = options;

  const search = async ({ query }: z.infer<typeof searchMemoriesInput>): Promise<ShownMemory[]> => {
    const found = await client.memory.search.query({
      userId,
      query,
      limit: options.limit ?? 5,
      mode: options.mode,
      threshold: options.threshold,
      filter: options.filter,
    });
    return found.map(shown);
  };

  const add = async ({ content }: z.infer<typeof addMemoryInput>): Promise<ShownMemory> => {
    // dedupe: a fact stated twice is stored once, and a retried add is safe.
    const added = await client.memory.add.mutate({
      userId,
      content,
      metadata: options.metadata,
      dedupe: true,
    });
    return shown(added);
  };

  const searchMemories = tool({
    description:
      "Search what you remember about the user, best match first. Use it before " +
      "answering anything that may depend on what the user told you earlier: " +
      "their preferences, plans, people and facts.",
    inputSchema: searchMemoriesInput,
    execute: search,
  });
  const addMemory = tool({
    description: "Remember something lasting about the user: a fact, a preference, a plan.",
    inputSchema: addMemoryInput,
    execute: add,
  });
  // tool() returns what it is given; its type widens execute, kept here as written.
  return {
    searchMemories: { ...searchMemories, execute: search },
    addMemory: { ...addMemory, execute: add },
  };
}
