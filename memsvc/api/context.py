"""The app's :class:`~memsvc.runtime.Runtime` and this request's store, for views.

A tRPC request's calls get both from its :class:`Exchange`, resolved once:
each access through Flask's context proxies (``current_app``, ``g``,
``request``) costs about a microsecond, and a call made dozens.
"""

from __future__ import annotations

import typing as t

from flask import Flask
from flask import current_app
from flask import g
from flask import request

from ..embeddings import Embedder
from ..observability import metrics
from ..runtime import Runtime
from ..store import FullStore


def runtime() -> Runtime:
    return current_app.extensions["memsvc"]


def store() -> FullStore:
    """This request's store, on this thread's connection."""
    if "memsvc_store" not in g:
        g.memsvc_store = runtime().store()
    return g.memsvc_store


def embedder() -> Embedder:
    return runtime().embedder


def release_store(exc: BaseException | None = None) -> None:
    """Teardown: leave no transaction open on the reused connection."""
    s = g.pop("memsvc_store", None)
    if s is None:
        return
    try:
        s.reset()
    except Exception:
        runtime().backend.discard()
    runtime().release()


def record_storage_problem(problem: str) -> None:
    """Remember, for /health, that storage failed a call just now."""
    runtime().backend.failures.failed(problem)
    metrics.storage_failure()


def clear_storage_problem() -> None:
    runtime().backend.failures.recovered()


class Exchange:
    """One HTTP request, as the API's calls see it: its app, settings, runtime, environ, store.

    Made once per request (:func:`exchange`); the calls of a batch share it.
    Its store is this request's (:func:`store`), released at the request's
    end as any other.
    """

    __slots__ = ("app", "config", "runtime", "environ", "method", "_store", "key_used", "verified")

    def __init__(self, app: Flask, environ: dict[str, t.Any]) -> None:
        self.app = app
        self.config: t.Mapping[str, t.Any] = app.config
        self.runtime: Runtime = app.extensions["memsvc"]
        self.environ = environ
        self.method: str = environ.get("REQUEST_METHOD", "GET").upper()
        self._store: FullStore | None = None
        #: Whether a call of this request has already written its key's lastUsedAt.
        self.key_used = False
        #: Credentials checked once per request, by name: the caller, or the refusal.
        self.verified: dict[str, t.Any] = {}

    def store(self) -> FullStore:
        s = self._store
        if s is None:
            s = self._store = store()
        return s

    def header(self, name: str) -> str | None:
        """A request header by its WSGI name (``HTTP_X_API_KEY``)."""
        return self.environ.get(name)


def exchange() -> Exchange:
    """The running request's :class:`Exchange`, made on first use."""
    ex: Exchange | None = g.get("memsvc_exchange")
    if ex is None:
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        ex = g.memsvc_exchange = Exchange(app, request.environ)
    return ex
