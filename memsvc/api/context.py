"""The app's :class:`~memsvc.runtime.Runtime` and this request's store, for views."""

from __future__ import annotations

from flask import current_app
from flask import g

from ..embeddings import Embedder
from ..observability import metrics
from ..runtime import Runtime
from ..store import Store


def runtime() -> Runtime:
    return current_app.extensions["memsvc"]


def store() -> Store:
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
