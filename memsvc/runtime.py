"""What one memsvc process holds: its database, embedder, search cache, token verifier.

The app (:func:`memsvc.create_app`) and the ``memsvc`` command build one
:class:`Runtime` each from the checked settings; services get its parts as
arguments, so nothing below the API layer knows about Flask. The database,
with its connections, limiter, preparation and locks, is a
:class:`~memsvc.store.Backend` of its kind.
"""

from __future__ import annotations

import typing as t

from .embeddings import Embedder
from .embeddings import make_embedder
from .embeddings.cache import CachedEmbedder
from .embeddings.lane import long_text_lane
from .embeddings.windows import use_lane
from .extracting import Extraction
from .housekeeping import Maintenance
from .limits import KeyLimiter
from .limits import Limits
from .search.cache import SearchCache
from .search.snapshot_dir import shared_dir
from .store import Backend
from .store import FullStore
from .store import open_backend
from .tokens import TokenVerifier
from .tokens import make_verifier


class Runtime:
    def __init__(self, settings: t.Mapping[str, t.Any], instance_path: str):
        self.settings = settings
        self.instance_path = instance_path
        self.backend: Backend = open_backend(settings, instance_path)
        # Cheap to make: a local model's weights load on its first use, in
        # the worker process, never in gunicorn's master before the fork.
        self.embedder: Embedder = make_embedder(settings, instance_path)
        if settings["EMBEDDER"] == "local":
            use_lane(long_text_lane(settings))
        self._query_cache: CachedEmbedder | None = None
        self.default_limits = Limits(
            settings["RATE_LIMIT_PER_MINUTE"], settings["CONCURRENCY_LIMIT"]
        )
        cache_bytes = settings["SEARCH_CACHE_MB"] * 1024 * 1024
        self.search_cache = (
            SearchCache(
                cache_bytes,
                self.embedder.dimensions,
                shared_dir=shared_dir(settings, instance_path),
                share_min_bytes=settings["SEARCH_SHARED_MIN_KB"] * 1024,
            )
            if cache_bytes
            else None
        )
        #: Verifies bearer tokens for the keys router; None if not configured.
        self.tokens: TokenVerifier | None = make_verifier(settings, instance_path)
        self._maintenance: Maintenance | None = None
        self._extraction: Extraction | None = None

    @property
    def limiter(self) -> KeyLimiter:
        """The per-key limiter of this kind of deployment (see :attr:`backend`)."""
        return self.backend.limiter

    def query_embedder(self, tenant: str) -> Embedder:
        """For a tenant's search queries: the embedder, remembering their recent queries.

        Each tenant has entries of its own: a query another tenant asked is
        as slow as a new one.
        """
        entries = self.settings["QUERY_CACHE_ENTRIES"]
        if not entries:
            return self.embedder
        cache = self._query_cache
        if cache is None or cache.embedder is not self.embedder:
            cache = self._query_cache = CachedEmbedder(self.embedder, entries)
        return cache.scoped(tenant)

    def start_maintenance(self) -> None:
        """Start this process's maintenance thread (see :mod:`memsvc.housekeeping`), once."""
        if self._maintenance is None or not self._maintenance.is_alive():
            self._maintenance = Maintenance(
                self.backend,
                self.search_cache,
                self.settings["MAINTENANCE_SECONDS"],
                self.settings["JOB_RETENTION_DAYS"],
            )
            self._maintenance.start()

    @property
    def extraction(self) -> Extraction | None:
        """This process's extraction (None: no language model configured); not started."""
        if self.settings["LLM_URL"] is None:
            return None
        if self._extraction is None:
            self._extraction = Extraction(self.backend, self.embedder, self.settings)
        return self._extraction

    def start_extraction(self) -> None:
        """Start this process's extraction thread (see :mod:`memsvc.extracting`), once."""
        extraction = self.extraction
        if extraction is not None and not extraction.is_alive():
            extraction.start()

    def wake_extraction(self) -> None:
        """A job was queued: this process's extraction thread looks at once (if it runs)."""
        if self._extraction is not None:
            self._extraction.wake()

    def store(self) -> FullStore:
        """A store on this thread's connection (until :meth:`release`)."""
        return self.backend.store()

    def release(self) -> None:
        """This thread is done with its store for now (the end of a request)."""
        self.backend.release()

    def prepare(self, *, check_embedder: bool) -> None:
        """Create or migrate the database; refuse one made for another model.

        :param check_embedder: only maintenance commands such as ``memsvc
            reembed`` work on a database whose vectors come from another model.
        """
        self.backend.prepare(
            self.embedder.model_id,
            self.embedder.dimensions,
            check_embedder=check_embedder,
            prepare_model=self.embedder.prepare,
        )

    def close(self) -> None:
        """Stop maintenance, close every connection and let go of the database."""
        if self._maintenance is not None:
            self._maintenance.stop()
            self._maintenance.join(10)
        if self._extraction is not None:
            self._extraction.stop()
        self.backend.close()
