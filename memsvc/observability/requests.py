"""Each request: its id, what it called, one access line, and its calls' metrics.

:class:`RequestMiddleware` wraps the WSGI app. It keeps an incoming
``X-Request-Id`` when it is a sensible one (1 to 128 characters of
letters, digits and ``-_.:/+=@``), else makes one, answers it on every
response, and names it in every log line written while the request runs
(:class:`RequestIdFilter`). The tRPC layer reports each call
(:func:`call_done`): procedure, code and the caller's key and tenant go to
the access line, and the call's count and duration to the metrics.

The access line (logger ``memsvc.access``) never holds a query string,
user id, text or secret unless ``MEMSVC_LOG_FULL_URLS`` asks for whole
URLs.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
import typing as t
import uuid

from flask import request

from . import metrics

access_log = logging.getLogger("memsvc.access")

HEADER = "X-Request-Id"
_ENVIRON_ID = "HTTP_X_REQUEST_ID"
_VALID_ID = re.compile(r"[A-Za-z0-9\-_.:/+=@]{1,128}")
#: Where a request's record lives in the WSGI environ.
RECORD = "memsvc.request"

#: This request's id, for log lines written while it runs.
current_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "memsvc_request_id", default=None
)


def request_id(given: str | None) -> str:
    """``given`` if it is a valid request id, else a new one."""
    if given is not None and _VALID_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


class Record:
    """What a request did, filled in as it runs."""

    __slots__ = ("id", "calls", "key", "tenant")

    def __init__(self, rid: str) -> None:
        self.id = rid
        #: (procedure, code) of each call, in order.
        self.calls: list[tuple[str, str]] = []
        self.key: str | None = None
        self.tenant: str | None = None


def call_done(call: t.Any, error: t.Any, started: float) -> None:
    """One tRPC call answered (``error``: its ApiError, None if it succeeded).

    Notes it for the access line, counts and times it.
    """
    code = "OK" if error is None else error.code
    metrics.call(call.path, code, time.perf_counter() - started)
    if code == "TOO_MANY_REQUESTS":
        metrics.refused(error.message)
    record = request.environ.get(RECORD)
    if record is None:
        return
    record.calls.append((call.path, code))
    caller = call.caller
    if caller is not None and record.tenant is None:
        record.tenant = caller.tenant
        key = getattr(caller, "key", None)
        if key is not None:
            record.key = key.id


def request_failed(code: str) -> None:
    """A request refused as a whole (no call ran): its error code for the access line."""
    record = request.environ.get(RECORD)
    if record is not None:
        record.calls.append(("-", code))


class RequestMiddleware:
    """WSGI middleware: request ids, the access line."""

    def __init__(self, app: t.Any, *, full_urls: bool = False, json_lines: bool = False) -> None:
        self.app = app
        self.full_urls = full_urls
        self.json_lines = json_lines

    def __call__(self, environ: dict[str, t.Any], start_response: t.Callable[..., t.Any]) -> t.Any:
        started = time.perf_counter()
        rid = request_id(environ.get(_ENVIRON_ID))
        record = environ[RECORD] = Record(rid)
        token = current_id.set(rid)
        answer: list[t.Any] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: t.Any = None) -> t.Any:
            headers.append((HEADER, rid))
            answer[:] = [status, headers]
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, start)
        finally:
            if access_log.isEnabledFor(logging.INFO):
                self._log(environ, record, answer, time.perf_counter() - started)
            current_id.reset(token)

    def _log(
        self, environ: dict[str, t.Any], record: Record, answer: list[t.Any], seconds: float
    ) -> None:
        status = int(answer[0][:3]) if answer else 500
        size = "-"
        for name, value in answer[1] if answer else ():
            if name == "Content-Length":
                size = value
                break
        path = environ.get("PATH_INFO", "")
        if self.full_urls and environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        procedures = ",".join(p for p, _ in record.calls if p != "-") or "-"
        codes = [c for _, c in record.calls if c != "OK"]
        fields = {
            "request_id": record.id,
            "remote": environ.get("REMOTE_ADDR", "-"),
            "method": environ.get("REQUEST_METHOD", "-"),
            "path": path,
            "status": status,
            "bytes": size,
            "duration_ms": round(seconds * 1000, 2),
            "procedures": procedures,
            "error": ",".join(dict.fromkeys(codes)) or "-",
            "key_id": record.key or "-",
            "tenant": record.tenant or "-",
        }
        if self.json_lines:
            access_log.info("access", extra={"memsvc": fields})
            return
        access_log.info(
            '%s "%s %s %s" %s %s %.1fms procedures=%s error=%s key=%s tenant=%s',
            fields["remote"], fields["method"], path, environ.get("SERVER_PROTOCOL", "-"),
            status, size, seconds * 1000, procedures, fields["error"], fields["key_id"],
            _quoted(fields["tenant"]),
            extra={"memsvc": fields},
        )  # fmt: skip


def _quoted(text: str) -> str:
    """A tenant id as one word: quoted when it holds spaces or quotes."""
    if text.isprintable() and " " not in text and '"' not in text:
        return text
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
