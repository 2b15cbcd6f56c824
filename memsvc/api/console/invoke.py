"""The console's one way to data: a procedure of the API, called as the API calls it.

A console page does not reach services or the store itself. It runs the same
declared procedure a tRPC request would (``memory.getAll``, ``keys.revoke``),
through the wire's own :func:`~memsvc.api.trpc.run_procedure`: that
procedure's middleware (the API key or token check, the key's rate and
concurrency limits, lastUsedAt), its input schema and its handler, and gets
the very JSON the API would answer, its errors worded as the API words
them. The session's credential is presented to that middleware as the
request's ``x-api-key`` or ``Authorization`` header for the duration of the
call, replacing whatever the browser sent.
"""

from __future__ import annotations

import contextlib
import time
import typing as t

from flask import current_app
from flask import request

from ...errors import ApiError
from ...errors import InternalError
from ...observability.requests import call_done
from ..context import exchange
from ..procedures import Call
from ..procedures import Procedure
from ..trpc import run_procedure

_HEADERS = ("HTTP_X_API_KEY", "HTTP_AUTHORIZATION")


class _Given:
    """A call's input, as the wire's parsed inputs hand it over."""

    is_batch = False

    def __init__(self, value: t.Any):
        self.value = value

    def get(self, index: int) -> t.Any:
        return self.value


@contextlib.contextmanager
def _presenting(api_key: str | None, token: str | None) -> t.Iterator[None]:
    environ = request.environ
    saved = {name: environ.pop(name) for name in _HEADERS if name in environ}
    if api_key is not None:
        environ["HTTP_X_API_KEY"] = api_key
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    try:
        yield
    finally:
        for name in _HEADERS:
            environ.pop(name, None)
        environ.update(saved)


def invoke(
    path: str,
    input: dict[str, t.Any],
    *,
    api_key: str | None = None,
    token: str | None = None,
    then: t.Callable[[t.Any], t.Any] | None = None,
) -> tuple[t.Any, Call]:
    """Run procedure ``path`` with ``input``; its answer as JSON data, and the call.

    With ``then``, what ``then`` makes of that data instead, made inside the
    call: before its middleware gives back the concurrency slot it took.

    :raises ApiError: what the API would answer the call with (401, 404, 429...).
    """
    proc: Procedure = current_app.extensions["trpc"][path]
    ex = exchange()
    call = Call(path, 0, proc, t.cast(t.Any, _Given(input)), ex)
    call.budget = ex.config["MAX_RESPONSE_BYTES"]
    dump = proc.output.dump
    finish = dump if then is None else (lambda result: then(dump(result)))
    started = time.perf_counter()
    with _presenting(api_key, token):
        try:
            data = run_procedure(call, proc, finish)
        except ApiError as e:
            call_done(call, e, started)
            raise
        except Exception:
            call_done(call, InternalError("Internal server error"), started)
            raise
    # Counted and logged as the API's calls are: its key and tenant on the access line.
    call_done(call, None, started)
    return data, call
