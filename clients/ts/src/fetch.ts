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

/** A fetch for @trpc/client's links that makes memsvc's error envelopes readable to it. */
export function memsvcFetcher(
  inner: typeof fetch = globalThis.fetch,
): (url: string | URL | Request, init?: RequestInit) => Promise<Response> {
  return async (url, init) => {
    const response = await inner(url, init);
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

/** The adapter over the global fetch. */
export const memsvcFetch = memsvcFetcher();
