// The fetch shim from memsvc's README, for @trpc/client.
//
// memsvc puts the spec's string error codes ("NOT_FOUND") in error.code;
// @trpc/client only decodes tRPC's numeric JSON-RPC codes there and would
// report every failed call as "Unable to transform response from server".
// This maps the string code to the numeric one before the client reads the
// body; err.data.code and err.data.httpStatus then work as usual.

const TRPC_CODES = {
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
  SERVICE_UNAVAILABLE: -32603,
};

function numericCode(envelope) {
  if (envelope && envelope.error && typeof envelope.error.code === "string") {
    envelope.error.code = TRPC_CODES[envelope.error.code] ?? -32603;
  }
  return envelope;
}

export async function memsvcFetch(url, init) {
  const response = await fetch(url, init);
  if (response.status === 200) return response; // no errors inside
  const text = await response.text();
  let body;
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
}
