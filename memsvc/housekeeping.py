"""A worker's housekeeping thread: expired memories removed, stale cached vectors dropped.

Each round also deletes the extraction jobs that ended longer ago than
``MEMSVC_JOB_RETENTION_DAYS`` (their facts stay).

Expired memories are invisible from the moment they expire; every
``MAINTENANCE_SECONDS`` each worker deletes those whose time is up (with
their vectors, history and index rows, as a delete does); if anything was
deleted since its last round (by anyone), it checkpoints the database so
the deleted bytes are overwritten in the file and gone from the WAL too
(without ever making writers wait: if a long read is in the way, the next
round tries again);
and it drops from its search cache the users whose memories changed, and
rewrites or removes the snapshot files the workers share that hold vectors
of deleted memories or erased users (one worker at a time), so vectors of
erased memories do not stay in memory or on disk. Several workers doing it at once is
harmless: each deletion is a transaction, and a memory deleted by one is
simply not found by the others.

It needs only the database (:class:`~memsvc.store.Backend`: stores, and the
limiter to sweep) and the search cache, not the whole process's runtime.
"""

from __future__ import annotations

import logging
import threading

from .observability import metrics
from .search.cache import SearchCache
from .services import jobs
from .services import memories
from .store import Backend

log = logging.getLogger(__name__)


class Maintenance(threading.Thread):
    def __init__(
        self,
        backend: Backend,
        search_cache: SearchCache | None,
        interval: float,
        job_retention_days: int = 0,
    ):
        super().__init__(name="memsvc-maintenance", daemon=True)
        self.backend = backend
        self.search_cache = search_cache
        self.interval = interval
        #: Extraction jobs that ended longer ago than this are deleted (0: never).
        self.job_retention_days = job_retention_days
        self.stopping = threading.Event()
        self._erasures = -1

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.once()
            except Exception:
                # Never let housekeeping take a worker down; try again later.
                log.exception("maintenance failed")

    def once(self) -> int:
        """One round; returns how many expired memories were removed."""
        store = self.backend.store()
        try:
            removed = memories.purge_expired(store)
            metrics.purged(removed)
            if removed:
                log.info("removed %d expired memories", removed)
            ended = jobs.purge_ended(store, self.job_retention_days)
            if ended:
                log.info("removed %d extraction jobs past their retention", ended)
            erasures = store.erasures()
            # A checkpoint a long read was in the way of is tried next round.
            if erasures != self._erasures and store.checkpoint():
                self._erasures = erasures
            if self.search_cache is not None:
                self.search_cache.prune(store)
            # Limits: forget keys idle for minutes (PostgreSQL: any key's
            # rows; SQLite: the files of keys that come and go).
            self.backend.limiter.sweep()
        finally:
            store.reset()
            self.backend.release()
        metrics.sample(self.backend, self.search_cache)
        return removed

    def stop(self) -> None:
        self.stopping.set()
