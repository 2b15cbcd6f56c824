"""Each request: its id, what it called, one access line, and its calls' metrics.

:class:`RequestMiddleware` wraps the WSGI app. It keeps an incoming
``X-Request-Id`` when it is a sensible one (1 to 128 characters of
letters, digits and ``-_.:/+=@``), else makes one, answers it on every
response, and names it in every log line written while the request runs
(:class:`RequestIdFilter`). The tRPC layer reports each call
(:func:`call_done`): procedure, code and the caller's key and tenant go to
the access line, and the call's count and duration to the metrics.

The access line is written by :mod:`.access_log`.
"""

from __future__ import annotations

import contextvars
import logging
import random
import re
import time
import typing as t

from . import access_log
from . import metrics
from . import tracing
from .access_log import Record

HEADER = "X-Request-Id"
_ENVIRON_ID = "HTTP_X_REQUEST_ID"
_VALID_ID = re.compile(r"[A-Za-z0-9\-_.:/+=@]{1,128}")
#: The running request's record, for the calls it makes and log lines written meanwhile.
current: contextvars.ContextVar[Record | None] = contextvars.ContextVar(
    "memsvc_request", default=None
)


def request_id(given: str | None) -> str:
    """``given`` if it is a valid request id, else a new one."""
    if given is not None and _VALID_ID.fullmatch(given):
        return given
    # 128 random bits; random reseeds in each forked worker, so workers never share ids.
    return f"{random.getrandbits(128):032x}"


def call_done(call: t.Any, error: t.Any, started: float) -> None:
    """One tRPC call answered (``error``: its ApiError, None if it succeeded).

    Notes it for the access line, counts and times it.
    """
    code = "OK" if error is None else error.code
    metrics.call(call.path, code, time.perf_counter() - started)
    tracing.call_span(call.path, code, started)
    if code == "TOO_MANY_REQUESTS":
        metrics.refused(error.reason)
    record = current.get()
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
    record = current.get()
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
        record = Record(rid)
        token = current.set(record)
        answer: list[t.Any] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: t.Any = None) -> t.Any:
            headers.append((HEADER, rid))
            answer[:] = [status, headers]
            return start_response(status, headers, exc_info)

        try:
            with tracing.request_span(environ, rid):
                return self.app(environ, start)
        finally:
            if access_log.log.isEnabledFor(logging.INFO):
                access_log.write(
                    environ, record, answer, time.perf_counter() - started,
                    full_urls=self.full_urls, json_lines=self.json_lines,
                )  # fmt: skip
            current.reset(token)
