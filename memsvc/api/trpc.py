"""The tRPC wire protocol: single and batch calls of the registered procedures, envelopes.

``GET /trpc/<router>.<op>?input=<json>`` runs a query and
``POST /trpc/<router>.<op>`` with a JSON body runs a mutation. With
``?batch=1`` the path holds several comma-separated procedures and the
input is an object keyed ``"0"``, ``"1"``, ...; the answer is then an array
with one envelope per call, in order. Each call is authenticated,
validated and answered on its own, as tRPC does.

Procedures are declared with :class:`~.procedures.Router`; registering a
router adds them to the app's registry, ``app.extensions["trpc"]``. A call
goes: find the procedure (404) → check the HTTP method (405) → its
middleware (authentication, limits) → read and validate its input (400) →
the handler → its output's serialiser → ``{"result": {"data": ...}}``.
Any :class:`~memsvc.errors.ApiError` on the way becomes ``{"error":
{"message", "code", "data": {"code", "httpStatus", "path"}}}``; anything
else is logged and answered as a bare 500, never with a trace.
"""

from __future__ import annotations

import json
import logging
import time
import typing as t
from urllib.parse import unquote_to_bytes

from flask import Blueprint
from flask import Response
from flask import request
from flask.blueprints import BlueprintSetupState
from marshmallow import ValidationError
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import PathConverter

from .. import wire
from ..errors import ApiError
from ..errors import BadRequest
from ..errors import ErrorEnvelope
from ..errors import InternalError
from ..errors import MethodNotSupported
from ..errors import NotFound
from ..errors import PayloadTooLarge
from ..errors import ServiceUnavailable
from ..errors import UnsupportedMediaType
from ..observability.metrics import batch as count_batch
from ..observability.requests import call_done
from ..observability.requests import request_failed
from ..rules import strict_json
from ..store import storage_problem
from .context import Exchange
from .context import clear_storage_problem
from .context import exchange
from .context import record_storage_problem
from .inputs import error_text
from .procedures import MUTATION
from .procedures import QUERY
from .procedures import Call
from .procedures import Procedure
from .procedures import through

log = logging.getLogger(__name__)

_METHOD = {QUERY: "GET", MUTATION: "POST"}


class _Undefined:
    """A call with no input at all (JavaScript's ``undefined``)."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED = _Undefined()

#: How a query takes its input, told to a query that came without one.
QUERY_INPUT_HINT = "send ?input=<URL-encoded JSON object>"


class ProcedurePath(PathConverter):
    """What follows ``/trpc/``: any text at all, newlines included.

    Werkzeug's ``path`` stops matching at a newline (``.`` in its pattern),
    so ``/trpc/memory.getAll%0A`` was answered outside tRPC's handling, and
    a batch naming such a procedure got one error instead of its array.
    """

    regex = "[^/](?s:.*?)"


bp = Blueprint("trpc", __name__)


@bp.record_once
def _add_converter(state: BlueprintSetupState) -> None:
    # Before the routes below are added to the app's map, which looks it up by name.
    state.app.url_map.converters["procedures"] = ProcedurePath


# Every method reaches tRPC's own handling, as on a tRPC server: HEAD is 204,
# others than GET and POST are refused in the error envelope (OPTIONS too:
# the app turns off Flask's automatic OPTIONS answer).
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@bp.route("/trpc", defaults={"path": ""}, methods=_METHODS, strict_slashes=False)
@bp.route("/trpc/<procedures:path>", methods=_METHODS)
def endpoint(path: str) -> Response:
    ex = exchange()
    if ex.method == "HEAD":
        return Response(status=204, headers=NO_STORE)
    query = _query_values(ex.environ.get("QUERY_STRING", ""))
    is_batch = query.get(b"batch") == b"1"
    try:
        calls = _calls(ex, path, is_batch, query.get(b"input"))
    except ApiError as e:
        # A request that is wrong as a whole has one answer, with no path.
        request_failed(e.code)
        return error_response(e, headers=e.headers)
    budget = _Budget(ex.config["MAX_RESPONSE_BYTES"])
    if not is_batch:
        return _text_response(*_run(calls[0], budget))
    results = [_run(call, budget) for call in calls]
    count_batch(len(calls))
    statuses = {status for _, status, _ in results}
    headers: dict[str, str] = {}
    for _, _, extra in results:
        for name, value in extra.items():
            if name == "Retry-After" and name in headers:
                value = str(max(int(value), int(headers[name])))
            headers[name] = value
    return _text_response(
        "[" + ",".join(text for text, _, _ in results) + "]",
        statuses.pop() if len(statuses) == 1 else 207,
        headers,
    )


class _Budget:
    """How many bytes of answers a request may still produce, batch calls together.

    A batch of 100 calls each listing 1,000 long memories would otherwise
    build gigabytes in one worker: a call whose answer would go past the
    budget is answered 413 instead, and so is every call after it.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.left = limit

    def spend(self, text: str) -> None:
        size = len(text.encode("utf-8")) if len(text) * 4 > self.left else len(text)
        if size > self.left:
            self.left = 0
            raise self.exceeded()
        self.left -= size

    def exceeded(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"Answer too large: the answers to this request would exceed {self.limit} bytes "
            "(MEMSVC_MAX_RESPONSE_BYTES); ask for fewer memories per call (limit, cursor) or "
            "fewer calls per batch"
        )


def _calls(ex: Exchange, path: str, is_batch: bool, raw_input: bytes | None) -> list[Call]:
    if ex.method != "GET":
        content_type = ex.environ.get("CONTENT_TYPE")
        if content_type is None:
            raise UnsupportedMediaType("Missing content-type header")
        # The media type alone, parameters (charset) aside, as tRPC compares it.
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            raise UnsupportedMediaType(f'Unsupported content-type "{content_type}"')
    registry: dict[str, Procedure] = ex.app.extensions["trpc"]
    inputs = _Inputs(ex, is_batch, raw_input)
    if not is_batch:
        return [Call(path, 0, registry.get(path), inputs, ex)]
    paths = path.split(",")
    if len(paths) > ex.config["MAX_BATCH_SIZE"]:
        raise BadRequest(f"Batch call exceeds maximum size ({ex.config['MAX_BATCH_SIZE']} calls)")
    procedures = [registry.get(p) for p in paths]
    types = list(dict.fromkeys(p.type for p in procedures if p is not None))
    if len(types) > 1:
        raise BadRequest(f"Cannot mix procedure types in call: {', '.join(types)}")
    return [
        Call(p, i, proc, inputs, ex)
        for i, (p, proc) in enumerate(zip(paths, procedures, strict=True))
    ]


def _run(call: Call, budget: _Budget) -> tuple[str, int, dict[str, str]]:
    """One call's answer, as JSON text: its envelope, status and headers."""
    started = time.perf_counter()
    try:
        if budget.left <= 0:
            raise budget.exceeded()
        call.budget = budget.left
        text = '{"result":{"data":' + _execute(call) + "}}"
        budget.spend(text)
        if call.procedure is not None and call.procedure.type == MUTATION:
            clear_storage_problem()  # a write went through: storage works again
        call_done(call, None, started)
        return text, 200, {}
    except ApiError as e:
        call_done(call, e, started)
        return _dump(error_body(e, call.path)), e.status, e.headers
    except Exception as e:
        problem = storage_problem(e)
        if problem is None:
            log.exception("%s failed", call.path)
            error: ApiError = InternalError("Internal server error")
        else:
            # The storage, not the call, is at fault: say so, and let the
            # caller come back (the data is safe; nothing half-written).
            log.warning("%s: storage unavailable: %s (%s)", call.path, problem, e)
            record_storage_problem(problem)
            error = ServiceUnavailable(
                f"Storage unavailable: {problem}; try again later",
                headers={"Retry-After": "5"},
            )
        call_done(call, error, started)
        return _dump(error_body(error, call.path)), error.status, error.headers


def _execute(call: Call) -> str:
    proc = call.procedure
    if proc is None:
        raise NotFound(f'No procedure found on path "{call.path}"')
    method = call.exchange.method
    if method != _METHOD[proc.type]:
        raise MethodNotSupported(
            f'Unsupported {method}-request to {proc.type} procedure at path "{call.path}"',
            headers={"Allow": _METHOD[proc.type]},
        )
    return run_procedure(call, proc, proc.output.encode)


_T = t.TypeVar("_T")


def run_procedure(call: Call, proc: Procedure, finish: t.Callable[[t.Any], _T]) -> _T:
    """``call`` of ``proc``, once found and its method checked: the one way a procedure runs.

    Through the procedure's middleware (its credential, limits, lastUsedAt),
    then its input read and validated (400), its handler, and ``finish``
    applied to the handler's result: the wire encodes it, the console
    renders a page from it. ``finish`` runs before the middleware gives
    back what it took, so its work is done inside the call's concurrency slot.
    """
    return through(proc.middleware, call, lambda: finish(proc.handler(call, _params(call, proc))))


def _params(call: Call, proc: Procedure) -> dict[str, t.Any]:
    """Past its middleware: the call's input, read and validated."""
    params: dict[str, t.Any] = {}
    if proc.input is not None:
        raw = call.raw_input()
        if raw is UNDEFINED and proc.input_optional:
            raw = {}
        if not isinstance(raw, dict):
            message = f"Invalid input: expected object, received {_js_type(raw)}"
            if raw is UNDEFINED and call.exchange.method == "GET" and not call.inputs.is_batch:
                # Flat (?userId=...) and deep-object (?input[userId]=...)
                # parameters, as OpenAPI generators send them, end here too.
                message += f"; {QUERY_INPUT_HINT}"
            raise BadRequest(message)
        try:
            params = proc.input.load(raw)
        except ValidationError as e:
            raise BadRequest("Invalid input: " + "; ".join(error_text(e.messages))) from None
    return params


class _Inputs:
    """The inputs of a request's calls, parsed once, on first use.

    Parsing waits until a call needs its input, after authentication, so a
    caller without a valid key learns that first (as with tRPC).
    """

    def __init__(self, ex: Exchange, is_batch: bool, query_input: bytes | None):
        self.exchange = ex
        self.is_batch = is_batch
        #: A query's ``input`` parameter as the URL holds it, ``%XX``-encoded.
        self.query_input = query_input
        self._parsed: t.Any = None
        self._error: ApiError | None = None
        self._done = False

    def get(self, index: int) -> t.Any:
        if not self._done:
            try:
                self._parsed = self._parse()
            except ApiError as e:
                self._error = e
            self._done = True
        if self._error is not None:
            raise self._error
        if not self.is_batch:
            return self._parsed
        if not isinstance(self._parsed, dict):
            raise BadRequest('"input" needs to be an object when doing a batch call')
        return self._parsed.get(str(index), UNDEFINED)

    def _parse(self) -> t.Any:
        if self.exchange.method == "GET":
            # Werkzeug would quietly replace invalid UTF-8 with U+FFFD; the
            # raw query string is parsed so that garbage is refused, not stored.
            if self.query_input is None:
                return UNDEFINED
            try:
                raw = unquote_plus_bytes(self.query_input).decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest("input is not valid UTF-8") from None
            if not raw:
                return UNDEFINED
            return parse_json(raw)
        body = _read_body(self.exchange)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("Request body is not valid UTF-8") from None
        return parse_json(text.removeprefix("\ufeff"))


def _read_body(ex: Exchange) -> bytes:
    limit = ex.config["MAX_CONTENT_LENGTH"]
    too_large = PayloadTooLarge(f"Request body is larger than {limit} bytes")
    if request.content_length is not None:
        try:
            return request.get_data(cache=True)
        except RequestEntityTooLarge:
            raise too_large from None
    # A chunked body has no length up front; Werkzeug would quietly stop
    # reading at the limit, so read one byte past it to tell.
    stream = ex.environ.get("wsgi.input")
    try:
        body = stream.read(limit + 1) if stream is not None else b""
    except Exception as e:
        # The server's own framing error (gunicorn raises InvalidChunkSize
        # and the like from inside the read): the caller sent a broken body.
        log.info("unreadable request body: %s", type(e).__name__)
        raise BadRequest("Malformed request body") from None
    if len(body) > limit:
        raise too_large
    return body


_WANTED = (b"batch", b"input")


def unquote_plus_bytes(value: bytes) -> bytes:
    """A query string's value, ``+`` and ``%XX`` decoded."""
    return unquote_to_bytes(value.replace(b"+", b" "))


def _query_values(query_string: str) -> dict[bytes, bytes]:
    """The first value of ``batch`` (decoded) and of ``input`` (as sent) in the query string.

    Only these are found, not the whole query string parsed as Werkzeug's
    ``request.args`` would: the ``input`` of a query may be half a megabyte,
    and a call refused before its input is read (401, 429) must not pay for
    more than finding it. ``input`` is decoded when a call reads it
    (:class:`_Inputs`): 65,536 Chinese characters are 590 kB of ``%XX``,
    0.16 s of Python holding the worker's other threads back, for each call
    refused at once as much as for those answered.
    """
    found: dict[bytes, bytes] = {}
    if not query_string:
        return found
    # As Werkzeug reads it: the environ's string holds the URL's bytes as latin-1.
    for pair in query_string.encode("latin-1").split(b"&"):
        key, _, value = pair.partition(b"=")
        if key not in _WANTED:
            if b"%" not in key and b"+" not in key:
                continue
            key = unquote_plus_bytes(key)
            if key not in _WANTED:
                continue
        if key not in found:
            found[key] = value if key == b"input" else unquote_plus_bytes(value)
            if len(found) == len(_WANTED):
                break
    return found


def parse_json(text: str) -> t.Any:
    """Parse strict JSON (no NaN or Infinity), as a 400 on failure."""
    if not text.strip():
        raise BadRequest("Unexpected end of JSON input")
    try:
        return strict_json(text)
    except json.JSONDecodeError as e:
        raise BadRequest(f"Malformed JSON: {e.msg} at position {e.pos}") from None
    except ValueError as e:  # NaN, Infinity, or an integer with too many digits
        raise BadRequest(f"Malformed JSON: {e}") from None
    except RecursionError:
        raise BadRequest("Malformed JSON: nested too deeply") from None


def _js_type(value: t.Any) -> str:
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def error_body(error: ApiError, path: str | None) -> dict[str, t.Any]:
    """The error envelope of ``error`` (:class:`~memsvc.errors.ErrorEnvelope`)."""
    return ErrorEnvelope.of(error, path).json()


def error_response(
    error: ApiError, status: int | None = None, headers: dict[str, str] | None = None
) -> Response:
    """An answer of ``error`` alone, in its envelope (a request refused as a whole)."""
    return json_response(error_body(error, None), status or error.status, headers)


_dump = wire.encode


#: On every answer: none may be kept by a cache in front of memsvc (one keyed
#: on the URL would hand a tenant's GET answer to another), and what one
#: holds depends on the credential headers.
NO_STORE = {"Cache-Control": "no-store", "Vary": "X-API-Key, Authorization"}


def _text_response(text: str, status: int, headers: dict[str, str] | None) -> Response:
    return Response(
        text, status=status, headers={**NO_STORE, **(headers or {})}, mimetype="application/json"
    )


def json_response(
    body: t.Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A compact JSON response, keys in the order given, UTF-8 as is."""
    return _text_response(_dump(body), status, headers)
