"""What one app instance holds: its database, its embedder.

Views reach them through :func:`store` and :func:`embedder`; services get
them as arguments and never import Flask.
"""

from __future__ import annotations

import threading
import typing as t

from flask import current_app
from flask import g

from .db import Database
from .embeddings import Embedder
from .embeddings import make_embedder
from .errors import ConfigError
from .limits import Limiter
from .limits import Limits
from .limits import default_directory
from .search_cache import SearchCache
from .store import Store
from .store import StoreMismatch
from .tokens import TokenVerifier
from .tokens import make_verifier


class Runtime:
    def __init__(self, config: t.Mapping[str, t.Any], instance_path: str):
        self.db = Database(
            config["DATABASE"],
            busy_timeout_ms=config["SQLITE_BUSY_TIMEOUT_MS"],
            synchronous=config["SQLITE_SYNCHRONOUS"],
            mmap_mb=config["SQLITE_MMAP_MB"],
        )
        # Cheap to make: a local model's weights load on its first use, in
        # the worker process, never in gunicorn's master before the fork.
        self.embedder: Embedder = make_embedder(config)
        self.limiter = Limiter(
            config["LIMITS_DIR"] or default_directory(config["DATABASE"], instance_path)
        )
        self.default_limits = Limits(config["RATE_LIMIT_PER_MINUTE"], config["CONCURRENCY_LIMIT"])
        cache_bytes = config["SEARCH_CACHE_MB"] * 1024 * 1024
        self.search_cache = (
            SearchCache(cache_bytes, self.embedder.dimensions) if cache_bytes else None
        )
        #: Verifies bearer tokens for the keys router; None if not configured.
        self.tokens: TokenVerifier | None = make_verifier(config, instance_path)
        self._lock = threading.Lock()

    def prepare(self, *, check_embedder: bool) -> None:
        """Create or migrate the schema; refuse a database of another model."""
        try:
            store = Store(self.db.connection())
            store.migrate(self.embedder.model_id, self.embedder.dimensions)
            if check_embedder:
                store.check_embedder(self.embedder.model_id, self.embedder.dimensions)
        except StoreMismatch as e:
            raise ConfigError(str(e)) from None
        except Exception as e:
            raise ConfigError(f"MEMSVC_DATABASE {self.db.path!r} cannot be used: {e}") from None
        finally:
            # No connection may cross gunicorn's fork into the workers.
            self.db.close()


def runtime() -> Runtime:
    return current_app.extensions["memsvc"]


def store() -> Store:
    """This request's store, on this thread's connection."""
    if "memsvc_store" not in g:
        g.memsvc_store = Store(runtime().db.connection())
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
        runtime().db.discard()
