// Generated from memsvc's OpenAPI document (GET /openapi.json) by scripts/generate.mjs.
// Do not edit: run `npm run generate -- <URL of a memsvc's /openapi.json>`.

import { initTRPC } from "@trpc/server";

export interface AddMemoryInput {
  /** 1 to 256 characters. */
  userId: string;
  /** 1 to 65536 characters. */
  content: string;
  /**
   * Any JSON object, up to 65536 bytes as compact JSON and 32 levels deep.
   * @default {}
   */
  metadata?: {
    [key: string]: unknown;
  } | undefined;
  /**
   * ISO 8601 with its zone (Z or an offset such as +02:00), in the future; e.g. 2026-11-23T10:00:00Z.
   * format: date-time.
   */
  expiresAt?: string | null | undefined;
  /** @default false */
  dedupe?: boolean | undefined;
  /**
   * When it was said or happened, if not when it is stored (past or future: backfill); its time for occurredAfter/occurredBefore, asOf and time-aware ranking.
   * format: date-time.
   */
  occurredAt?: string | null | undefined;
}

export interface ApiKey {
  /**
   * The key record's id, which keys.revoke takes.
   * format: uuid.
   */
  id: string;
  /** The tenant. */
  idpUserId: string;
  idpKeyId: string;
  name: string;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  lastUsedAt: string | null;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  createdAt: string;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  revokedAt: string | null;
  /**
   * Calls per minute this key may make (0: unlimited); null: the server's setting, which service.info reports.
   * at least 0.
   */
  rateLimit: number | null;
  /**
   * Calls of this key executing at once (0: unlimited); null: the server's setting.
   * at least 0.
   */
  concurrencyLimit: number | null;
}

export interface CreateKeyInput {
  /** 1 to 256 characters. */
  name: string;
}

export interface CreatedKey {
  /**
   * The key record's id, which keys.revoke takes.
   * format: uuid.
   */
  id: string;
  /** The tenant. */
  idpUserId: string;
  idpKeyId: string;
  name: string;
  /** Shown in this answer only, never again. */
  secret: string;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  createdAt: string;
}

export interface DeleteAllResult {
  success: true;
  /** at least 0. */
  deleted: number;
}

export interface EndUser {
  userId: string;
  /**
   * Visible memories (not expired).
   * at least 1.
   */
  memories: number;
  /**
   * The newest add or update of any of their memories.
   * format: date-time.
   */
  lastWriteAt: string;
}

export type ErrorCode = "BAD_REQUEST" | "UNAUTHORIZED" | "FORBIDDEN" | "NOT_FOUND" | "METHOD_NOT_SUPPORTED" | "TIMEOUT" | "PAYLOAD_TOO_LARGE" | "UNSUPPORTED_MEDIA_TYPE" | "TOO_MANY_REQUESTS" | "INTERNAL_SERVER_ERROR" | "SERVICE_UNAVAILABLE";

/** Every error, whatever its cause. The code is a string (tRPC puts numbers there); the HTTP status equals data.httpStatus. */
export interface ErrorEnvelope {
  error: {
    /** For people. */
    message: string;
    code: ErrorCode;
    data: {
      code: ErrorCode;
      httpStatus: 400 | 401 | 403 | 404 | 405 | 408 | 413 | 415 | 429 | 500 | 503;
      /** The procedure that failed; absent when none could be named. */
      path?: string;
    };
  };
}

/** Conditions on metadata, all of which must hold. A key is a metadata key (a dotted key a.b reaches into nested objects); its value is a JSON value that the metadata value must equal, or an object with exactly one operator. gt, gte, lt and lte compare numbers with numbers and strings as ISO 8601 timestamps with a zone. */
export interface Filter {
  [key: string]: FilterCondition;
}

export type FilterCondition = string | number | boolean | null | unknown[] | {
  eq: unknown;
} | {
  ne: unknown;
} | {
  in: unknown[];
} | {
  nin: unknown[];
} | {
  /** format: date-time. */
  gt: number | string;
} | {
  /** format: date-time. */
  gte: number | string;
} | {
  /** format: date-time. */
  lt: number | string;
} | {
  /** format: date-time. */
  lte: number | string;
} | {
  exists: boolean;
} | {
  contains: unknown;
};

export interface GetAllInput {
  /** 1 to 256 characters. */
  userId: string;
  filter?: Filter | null | undefined;
  /**
   * ISO 8601 with its zone (Z or an offset such as +02:00), e.g. 2026-11-23T10:00:00Z.
   * format: date-time.
   */
  createdAfter?: string | null | undefined;
  /**
   * ISO 8601 with its zone (Z or an offset such as +02:00), e.g. 2026-11-23T10:00:00Z.
   * format: date-time.
   */
  createdBefore?: string | null | undefined;
  /** Only memories of these kinds: "memory" (added with memory.add), "message" (memory.ingest), "fact" (extraction). Default: all. */
  kinds?: Array<"memory" | "message" | "fact"> | null | undefined;
  /**
   * Only memories whose time (occurredAt, else createdAt) is after it.
   * format: date-time.
   */
  occurredAfter?: string | null | undefined;
  /**
   * Only memories whose time (occurredAt, else createdAt) is before it.
   * format: date-time.
   */
  occurredBefore?: string | null | undefined;
  /**
   * Answer as of this time: memories whose time is at or before it, facts current then (validTo unset or after it).
   * format: date-time.
   */
  asOf?: string | null | undefined;
  /**
   * Also facts that newer facts replaced (supersededBy set).
   * @default false
   */
  includeSuperseded?: boolean | undefined;
  /**
   * 1 to 1000.
   * @default 100
   */
  limit?: number | undefined;
  /** format: uuid. */
  cursor?: string | null | undefined;
}

export interface Health {
  status: "ok" | "error";
  db: "connected" | "disconnected";
  /** Epoch milliseconds. */
  timestamp: number;
}

export interface IdInput {
  /** format: uuid. */
  id: string;
}

export interface IngestInput {
  /** 1 to 256 characters. */
  userId: string;
  /**
   * The conversation to add to; a later call with the same id goes on where it stopped. Default: a new session.
   * 1 to 256 characters.
   */
  sessionId?: string | null | undefined;
  messages: Array<{
    role: "user" | "assistant" | "system" | "tool";
    /** 1 to 65536 characters. */
    content: string;
    /**
     * Who said it; answered as the message's speaker.
     * 1 to 256 characters.
     */
    name?: string | null | undefined;
    /**
     * When it was said. Default: the previous message's time; the first message's, the time of the call.
     * format: date-time.
     */
    at?: string | null | undefined;
    /**
     * Your id of the message: a message whose id its session already holds is not stored again.
     * 1 to 256 characters.
     */
    id?: string | null | undefined;
  }>;
  /**
   * Given to every message of the call.
   * @default {}
   */
  metadata?: {
    [key: string]: unknown;
  } | undefined;
  /** Also draw facts from the messages with the operator's language model. Default: the server's setting (MEMSVC_EXTRACT). */
  extract?: boolean | null | undefined;
}

export interface IngestResult {
  /** The session the messages are in. */
  sessionId: string;
  /** One memory per message, in the order given (a message already stored: the memory stored for it then). */
  memories: Memory[];
  /**
   * How many messages the session already held (by id).
   * at least 0.
   */
  duplicates: number;
  job?: Job;
}

export interface Job {
  /** format: uuid. */
  id: string;
  userId: string;
  /** The session of its messages. */
  sessionId?: string;
  /** queued: waiting to run (see error for why, when it waits); running: its model call is in flight; done: its facts are applied; failed: given up after its attempts, nothing of it applied (memory.retryJob). */
  status: "queued" | "running" | "done" | "failed";
  /**
   * Times it was run (each model call; a run whose worker stopped mid-call counts too).
   * at least 0.
   */
  attempts: number;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  createdAt: string;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  updatedAt: string;
  /** Why it failed, or why it waits. */
  error?: string;
  /** Done: the facts it added, those they superseded, and how many of the model's facts the user already had. */
  facts?: {
    added: string[];
    superseded: string[];
    /** at least 0. */
    unchanged: number;
  };
  /** The model tokens its calls took, all attempts together. */
  usage?: {
    /** at least 0. */
    promptTokens: number;
    /** at least 0. */
    completionTokens: number;
  };
}

export interface JobsInput {
  /**
   * Only this end user's jobs.
   * 1 to 256 characters.
   */
  userId?: string | null | undefined;
  /** Only jobs of this status. */
  status?: "queued" | "running" | "done" | "failed" | null | undefined;
  /**
   * 1 to 1000.
   * @default 100
   */
  limit?: number | undefined;
  /**
   * The last job id of the previous page.
   * format: uuid.
   */
  cursor?: string | null | undefined;
}

export interface Memory {
  /** format: uuid. */
  id: string;
  content: string;
  /** The end user, as given. */
  userId: string;
  /** The tenant that owns it. */
  idpUserId: string;
  metadata: {
    [key: string]: unknown;
  };
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  createdAt: string;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  updatedAt: string;
  /**
   * When it vanishes; absent when never.
   * format: date-time.
   */
  expiresAt?: string;
  /** "message" (stored by memory.ingest) or "fact" (drawn from messages by extraction); absent on a memory added with memory.add. */
  kind?: "message" | "fact";
  /**
   * When it was said or happened; absent: its time is createdAt.
   * format: date-time.
   */
  occurredAt?: string;
  /** A message's session. */
  sessionId?: string;
  role?: "user" | "assistant" | "system" | "tool";
  /** Who said a message (its name), when given. */
  speaker?: string;
  /**
   * A message's place in its session: 0, 1, 2... in the order received.
   * at least 0.
   */
  position?: number;
  /** Your id of a message, when given. */
  messageId?: string;
  /** The time expressions of its text ('yesterday', 'last May'), resolved against its time as calendar dates (inclusive). */
  dates?: Array<{
    text: string;
    /** format: date. */
    start: string;
    /** format: date. */
    end: string;
  }>;
  /** A fact's sources: the ids of the messages it was drawn from. */
  sources?: string[];
  /**
   * The id of the fact that replaced this one.
   * format: uuid.
   */
  supersededBy?: string;
  /**
   * When a superseded fact stopped being current.
   * format: date-time.
   */
  validTo?: string;
}

export interface MemoryIdInput {
  /** format: uuid. */
  id: string;
  /** 1 to 256 characters. */
  userId?: string | null | undefined;
}

export interface MemoryVersion {
  /** at least 1. */
  version: number;
  content: string;
  metadata: {
    [key: string]: unknown;
  };
  /** What made this version: an add, an update, or a newer fact replacing this one (supersede: it gained validTo and supersededBy). */
  event: "add" | "update" | "supersede";
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  at: string;
}

/** No input: leave it out, or give an object (its fields are ignored). */
export type NoInput = Record<string, never>;

export interface SearchInput {
  /** 1 to 256 characters. */
  userId: string;
  filter?: Filter | null | undefined;
  /**
   * ISO 8601 with its zone (Z or an offset such as +02:00), e.g. 2026-11-23T10:00:00Z.
   * format: date-time.
   */
  createdAfter?: string | null | undefined;
  /**
   * ISO 8601 with its zone (Z or an offset such as +02:00), e.g. 2026-11-23T10:00:00Z.
   * format: date-time.
   */
  createdBefore?: string | null | undefined;
  /** Only memories of these kinds: "memory" (added with memory.add), "message" (memory.ingest), "fact" (extraction). Default: all. */
  kinds?: Array<"memory" | "message" | "fact"> | null | undefined;
  /**
   * Only memories whose time (occurredAt, else createdAt) is after it.
   * format: date-time.
   */
  occurredAfter?: string | null | undefined;
  /**
   * Only memories whose time (occurredAt, else createdAt) is before it.
   * format: date-time.
   */
  occurredBefore?: string | null | undefined;
  /**
   * Answer as of this time: memories whose time is at or before it, facts current then (validTo unset or after it).
   * format: date-time.
   */
  asOf?: string | null | undefined;
  /**
   * Also facts that newer facts replaced (supersededBy set).
   * @default false
   */
  includeSuperseded?: boolean | undefined;
  /** 1 to 65536 characters. */
  query: string;
  /** @default "semantic" */
  mode?: "semantic" | "keyword" | "hybrid" | undefined;
  /**
   * 1 to 100.
   * @default 10
   */
  limit?: number | undefined;
  /**
   * A floor on each result's cosine similarity, in every mode. Omitted: the server's default threshold in semantic and hybrid mode (service.info's defaults.threshold), no floor in keyword mode.
   * 0 to 1.
   */
  threshold?: number | undefined;
  /**
   * Also answer, per result, why it ranked where it did.
   * @default false
   */
  explain?: boolean | undefined;
  /** Rank memories inside the time the query names ("last week", "in May 2023") higher: on by default in hybrid mode, off in the others. */
  time?: "on" | "off" | null | undefined;
  /**
   * The time the query's time expressions are resolved against (ISO, with its zone: "yesterday" is the day before its own date). Default: the time of the call, in UTC.
   * format: date-time.
   */
  now?: string | null | undefined;
  /**
   * Each result that is a message also carries up to this many messages of its session on either side (context.before, context.after).
   * 0 to 10.
   * @default 0
   */
  context?: number | undefined;
}

export interface SearchResult {
  /** format: uuid. */
  id: string;
  content: string;
  /** The end user, as given. */
  userId: string;
  /** The tenant that owns it. */
  idpUserId: string;
  metadata: {
    [key: string]: unknown;
  };
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  createdAt: string;
  /**
   * UTC with milliseconds, as JavaScript's toISOString writes it.
   * format: date-time.
   */
  updatedAt: string;
  /**
   * When it vanishes; absent when never.
   * format: date-time.
   */
  expiresAt?: string;
  /** "message" (stored by memory.ingest) or "fact" (drawn from messages by extraction); absent on a memory added with memory.add. */
  kind?: "message" | "fact";
  /**
   * When it was said or happened; absent: its time is createdAt.
   * format: date-time.
   */
  occurredAt?: string;
  /** A message's session. */
  sessionId?: string;
  role?: "user" | "assistant" | "system" | "tool";
  /** Who said a message (its name), when given. */
  speaker?: string;
  /**
   * A message's place in its session: 0, 1, 2... in the order received.
   * at least 0.
   */
  position?: number;
  /** Your id of a message, when given. */
  messageId?: string;
  /** The time expressions of its text ('yesterday', 'last May'), resolved against its time as calendar dates (inclusive). */
  dates?: Array<{
    text: string;
    /** format: date. */
    start: string;
    /** format: date. */
    end: string;
  }>;
  /** A fact's sources: the ids of the messages it was drawn from. */
  sources?: string[];
  /**
   * The id of the fact that replaced this one.
   * format: uuid.
   */
  supersededBy?: string;
  /**
   * When a superseded fact stopped being current.
   * format: date-time.
   */
  validTo?: string;
  /**
   * Cosine similarity of the query and the memory, clamped into [0, 1].
   * 0 to 1.
   */
  similarity: number;
  /** Which searches found it (keyword and hybrid modes). */
  matchedBy?: Array<"keyword" | "semantic">;
  /** Why it ranked where it did; only with explain: true. */
  explain?: {
    /**
     * The cosine similarity (equal to similarity).
     * 0 to 1.
     */
    cosine: number;
    /**
     * The keyword match's strength in [0, 1]: the share of the query's words, each weighted by its rarity among the user's own memories, that the memory holds; null when no query word matched (and in semantic mode).
     * 0 to 1.
     */
    keyword: number | null;
    /** What the mode ranked by: the cosine (semantic), the BM25 score (keyword), the sum of the parts (hybrid). */
    score: number;
    /** Hybrid mode: the named parts the score adds up: cosine, keyword, and where they apply cosineWithoutNames, neighbours, session, speaker, short, dates, time, recency, newer (docs/api.md, hybrid ranking). */
    parts?: {
      [key: string]: number;
    };
    /** When the search ranked by the time its query names: that time as written and its dates (inclusive), or null if the query names none. */
    time?: null | {
      text: string;
      /** format: date. */
      start: string;
      /** format: date. */
      end: string;
    };
  };
  /** With context > 0, on a result that is a message: up to that many messages of its session before and after it, in position order. */
  context?: {
    before: Memory[];
    after: Memory[];
  };
}

export interface ServiceInfo {
  version: string;
  embedder: {
    model: string;
    /** at least 1. */
    dimensions: number;
    maxTokens: number | null;
    /** 0 to 1. */
    recommendedThreshold: number | null;
  };
  defaults: {
    /** 0 to 1. */
    threshold: number;
    /** at least 1. */
    limit: number;
  };
  /** The calling key's limits, its own overrides included. */
  limits: {
    /**
     * 0: none.
     * at least 0.
     */
    perMinute: number;
    /**
     * 0: none.
     * at least 0.
     */
    concurrent: number;
  };
}

export interface Session {
  sessionId: string;
  /**
   * Visible messages (not expired).
   * at least 1.
   */
  messages: number;
  /**
   * The earliest of its messages' times.
   * format: date-time.
   */
  firstAt: string;
  /**
   * The latest of its messages' times.
   * format: date-time.
   */
  lastAt: string;
}

export interface SessionInput {
  /** 1 to 256 characters. */
  userId: string;
  /** 1 to 256 characters. */
  sessionId: string;
  /**
   * 1 to 1000.
   * @default 100
   */
  limit?: number | undefined;
  /**
   * A position: the page starts after it.
   * at least 0.
   */
  after?: number | null | undefined;
}

export interface SessionsInput {
  /** 1 to 256 characters. */
  userId: string;
  /**
   * 1 to 1000.
   * @default 100
   */
  limit?: number | undefined;
  /**
   * The last sessionId of the previous page.
   * 1 to 256 characters.
   */
  cursor?: string | null | undefined;
}

export interface SetKeyLimitsInput {
  /** format: uuid. */
  id: string;
  /** 0 to 100000. */
  rateLimit?: number | null | undefined;
  /** 0 to 10000. */
  concurrencyLimit?: number | null | undefined;
}

export interface Success {
  success: true;
}

/** Give at least one of content, metadata, expiresAt, occurredAt. */
export interface UpdateInput {
  /** format: uuid. */
  id: string;
  /** 1 to 256 characters. */
  userId?: string | null | undefined;
  /** 1 to 65536 characters. */
  content?: string | undefined;
  /** Any JSON object, up to 65536 bytes as compact JSON and 32 levels deep. */
  metadata?: {
    [key: string]: unknown;
  } | null | undefined;
  /**
   * ISO 8601 with its zone (Z or an offset such as +02:00), in the future; e.g. 2026-11-23T10:00:00Z.
   * format: date-time.
   */
  expiresAt?: string | null | undefined;
  /**
   * When it was said or happened, if not when it is stored (past or future: backfill); its time for occurredAfter/occurredBefore, asOf and time-aware ranking. null: its createdAt again.
   * format: date-time.
   */
  occurredAt?: string | null | undefined;
}

export interface UserInput {
  /** 1 to 256 characters. */
  userId: string;
}

export interface UsersInput {
  /**
   * 1 to 1000.
   * @default 100
   */
  limit?: number | undefined;
  /** The last userId of the previous page; the page starts after it (it need not still be a user). */
  cursor?: string | null | undefined;
  /**
   * Only end users whose userId starts with it.
   * @default ""
   */
  prefix?: string | undefined;
}

// -- the router ------------------------------------------------------------------

const t = initTRPC.create();

// A parser that only carries a type: this router is never run, memsvc is the server.
const is =
  <T>() =>
  (value: unknown): T =>
    value as T;
const served =
  <T>() =>
  (): T => {
    throw new Error("memsvc's procedures run on the memsvc server");
  };

const appRouter = t.router({
  keys: t.router({
    create: t.procedure.input(is<CreateKeyInput>()).mutation(served<CreatedKey>()),
    list: t.procedure.query(served<ApiKey[]>()),
    revoke: t.procedure.input(is<IdInput>()).mutation(served<Success>()),
    setLimits: t.procedure.input(is<SetKeyLimitsInput>()).mutation(served<ApiKey>()),
  }),
  memory: t.router({
    add: t.procedure.input(is<AddMemoryInput>()).mutation(served<Memory>()),
    delete: t.procedure.input(is<MemoryIdInput>()).mutation(served<Success>()),
    deleteAll: t.procedure.input(is<UserInput>()).mutation(served<DeleteAllResult>()),
    getAll: t.procedure.input(is<GetAllInput>()).query(served<Memory[]>()),
    getById: t.procedure.input(is<MemoryIdInput>()).query(served<Memory>()),
    history: t.procedure.input(is<MemoryIdInput>()).query(served<MemoryVersion[]>()),
    ingest: t.procedure.input(is<IngestInput>()).mutation(served<IngestResult>()),
    job: t.procedure.input(is<IdInput>()).query(served<Job>()),
    jobs: t.procedure.input(is<JobsInput>()).query(served<Job[]>()),
    retryJob: t.procedure.input(is<IdInput>()).mutation(served<Job>()),
    search: t.procedure.input(is<SearchInput>()).query(served<SearchResult[]>()),
    session: t.procedure.input(is<SessionInput>()).query(served<Memory[]>()),
    sessions: t.procedure.input(is<SessionsInput>()).query(served<Session[]>()),
    update: t.procedure.input(is<UpdateInput>()).mutation(served<Memory>()),
    users: t.procedure.input(is<UsersInput | undefined>()).query(served<EndUser[]>()),
  }),
  service: t.router({
    info: t.procedure.input(is<NoInput | undefined>()).query(served<ServiceInfo>()),
  }),
});

/** memsvc's procedures with their input and output types, for `createTRPCClient<AppRouter>`. */
export type AppRouter = typeof appRouter;

