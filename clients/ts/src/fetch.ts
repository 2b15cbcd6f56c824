// memsvc's string error codes, as the numbers @trpc/client decodes.
//
// memsvc puts tRPC's error names ("NOT_FOUND") in error.code, as its API
// specification asks; @trpc/client only decodes JSON-RPC numbers there and
// would report every failed call as "Unable to transform response from
// server". This adapter rewrites the code before the client reads the body,
// so err.data.code and err.data.httpStatus work as with any tRPC server.

/** tRPC's JSON-RPC number for each error code memsvc sends. */
export const TRPC_CODES: Readonly<Record<string, number>> = {
  PARSE_ERROR: -32700,
  BAD_REQUEST: -32600,
  INTERNAL_SERVER_ERROR: -32603,
  UNAUTHORIZED: -32001,
  FORBIDDEN: -32003,
  NOT_FOUND: -32004,
  METHOD_NOT_SUPPORTED: -32005,
  TIMEOUT: -32008,
  CONFLICT: -32009,
  PRECONDITION_FAILED: -32012,
  PAYLOAD_TOO_LARGE: -32013,
  UNSUPPORTED_MEDIA_TYPE: -32015,
  UNPROCESSABLE_CONTENT: -32022,
  TOO_MANY_REQUESTS: -32029,
  CLIENT_CLOSED_REQUEST: -32099,
  // tRPC has no number of its own for it; data.code still says SERVICE_UNAVAILABLE.
  SERVICE_UNAVAILABLE: -32603,
};

function numericCode(envelope: unknown): unknown {
  const error = (envelope as { error?: { code?: unknown } } | null)?.error;
  if (error && typeof error.code === "string") {
    error.code = TRPC_CODES[error.code] ?? TRPC_CODES.INTERNAL_SERVER_ERROR;
  }
  return envelope;
}

/** How the adapter retries. */
export interface RetryOptions {
  /** Retries of one request at most (0: none). Default: 3. */
  maxRetries?: number | undefined;
  /** A Retry-After longer than this many seconds is not waited for. Default: 60. */
  maxRetryWait?: number | undefined;
}

/**
 * What a fetch given to @trpc/client's links is called with: RequestInit's
 * fields, any of which may be undefined (the links' \`signal\` is, where
 * RequestInit's is null), so the fetcher fits a link's \`fetch\` under
 * exactOptionalPropertyTypes too.
 */
export type FetchInit = { [K in keyof RequestInit]?: RequestInit[K] | undefined };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Seconds a Retry-After header asks for (seconds or an HTTP date), or undefined. */
export function retryAfterSeconds(value: string | null): number | undefined {
  if (value === null) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}

/**
 * A fetch for @trpc/client's links that makes memsvc's error envelopes readable
 * to it, and retries what memsvc refused before doing anything.
 *
 * A 429 or 503 answering the whole request (memsvc refused every call in it:
 * a limit, a busy embedding provider, storage that could not take it) is sent
 * again after its Retry-After, writes included, at most `maxRetries` times;
 * then the error reaches the caller. A failed connection is retried for
 * queries (GET) only, with backoff: a write whose answer was lost may have
 * been done, so it is never sent twice. A 207 batch answer, some calls
 * refused and others done, is never resent.
 */
export function memsvcFetcher(
  inner: typeof fetch = globalThis.fetch,
  retry: RetryOptions = {},
): (url: string | URL | Request, init?: FetchInit) => Promise<Response> {
  const maxRetries = retry.maxRetries ?? 3;
  const maxRetryWait = retry.maxRetryWait ?? 60;
  return async (url, init) => {
    const isQuery = (init?.method ?? "GET").toUpperCase() === "GET";
    let response: Response;
    for (let attempt = 0; ; attempt++) {
      try {
        // Fields given as undefined are fields left out, to fetch as to the links.
        response = await inner(url, init as RequestInit | undefined);
      } catch (err) {
        if (!isQuery || attempt >= maxRetries) throw err;
        await sleep(250 * 2 ** attempt * (0.5 + Math.random()));
        continue;
      }
      if ((response.status === 429 || response.status === 503) && attempt < maxRetries) {
        const wait = retryAfterSeconds(response.headers.get("retry-after"));
        if (wait !== undefined && wait <= maxRetryWait) {
          await response.body?.cancel();
          await sleep(wait * 1000);
          continue;
        }
      }
      break;
    }
    // A 200 carries no error (a batch with any failure is 207 or the error's status).
    if (response.status === 200) return response;
    const text = await response.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return new Response(text, response);
    }
    body = Array.isArray(body) ? body.map(numericCode) : numericCode(body);
    return new Response(JSON.stringify(body), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

/** The adapter over the global fetch, with the default retries. */
export const memsvcFetch = memsvcFetcher();
