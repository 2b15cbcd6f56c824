// memsvc-client: a typed @trpc/client for memsvc.

import { createTRPCClient, httpBatchLink, httpLink } from "@trpc/client";
import type { TRPCClient } from "@trpc/client";

import { memsvcFetcher } from "./fetch.js";
import type { AppRouter, SearchResult } from "./generated.js";
import { searchDefaultsLink } from "./search.js";
import type { SearchMode } from "./search.js";

export { TRPCClientError, isTRPCClientError } from "@trpc/client";
export { TRPC_CODES, memsvcFetch, memsvcFetcher, retryAfterSeconds } from "./fetch.js";
export type { FetchInit, RetryOptions } from "./fetch.js";
export { JobTimeoutError, jobSettled, waitForJob } from "./jobs.js";
export type { JobReader, WaitForJobOptions } from "./jobs.js";
export { DEFAULT_SEARCH_MODE, searchDefaultsLink } from "./search.js";
export type { SearchDefaultsOptions, SearchMode } from "./search.js";
export type * from "./generated.js";

/** Why a search result ranked where it did: `explain` of a search with `explain: true`. */
export type SearchExplanation = NonNullable<SearchResult["explain"]>;

export interface MemsvcClientOptions {
  /** The server's root URL, e.g. `http://127.0.0.1:8000`; the client adds `/trpc`. */
  url: string;
  /** An API key (`sk_memsvc_...`): the `memory` and `service` procedures need one. */
  apiKey?: string | undefined;
  /** An identity-provider JWT naming the tenant: the `keys` procedures need one. */
  token?: string | undefined;
  /**
   * Send the calls made in the same tick in one request (`httpBatchLink`), or
   * each on its own (`httpLink`). Default: true.
   */
  batch?: boolean | undefined;
  /** At most this many calls per batch: the server's `MEMSVC_MAX_BATCH_SIZE`. Default: 100. */
  maxBatchSize?: number | undefined;
  /** More headers for every request. */
  headers?: Record<string, string> | undefined;
  /** The fetch underneath (default: the global one); memsvc's error adapter wraps it. */
  fetch?: typeof fetch | undefined;
  /**
   * Retries of a request memsvc refused with 429 or 503 (after its Retry-After),
   * and of a query whose connection failed. Default: 3; 0 turns them off.
   */
  maxRetries?: number | undefined;
  /** A Retry-After longer than this many seconds is not waited for. Default: 60. */
  maxRetryWait?: number | undefined;
  /**
   * The mode of a `memory.search` that names none. Default: `DEFAULT_SEARCH_MODE`,
   * "hybrid". (A search without `threshold` gets the one `service.info` recommends
   * for the deployment's model, in semantic and hybrid mode: see `searchDefaultsLink`.)
   */
  defaultMode?: SearchMode | undefined;
}

/** A memsvc client: `client.memory.add.mutate({ userId, content })` and so on. */
export type MemsvcClient = TRPCClient<AppRouter>;

/**
 * A @trpc/client proxy for a memsvc server, typed by memsvc's router. Searches
 * that name no mode are hybrid (or `defaultMode`); semantic and hybrid searches
 * without a threshold use the one the deployment recommends for its model.
 */
export function createMemsvcClient(options: MemsvcClientOptions): MemsvcClient {
  const headers: Record<string, string> = { ...options.headers };
  if (options.apiKey) headers["x-api-key"] = options.apiKey;
  if (options.token) headers["authorization"] = `Bearer ${options.token}`;
  const common = {
    url: options.url.replace(/\/+$/, "") + "/trpc",
    headers: () => headers,
    fetch: memsvcFetcher(options.fetch, {
      maxRetries: options.maxRetries,
      maxRetryWait: options.maxRetryWait,
    }),
  };
  const link =
    options.batch === false
      ? httpLink(common)
      : httpBatchLink({ ...common, maxItems: options.maxBatchSize ?? 100 });
  return createTRPCClient<AppRouter>({
    links: [searchDefaultsLink({ defaultMode: options.defaultMode }), link],
  });
}
