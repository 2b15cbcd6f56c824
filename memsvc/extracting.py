"""A worker's extraction: a thread that claims due jobs, and a pool that runs them.

Jobs run in the service's own processes: every gunicorn worker (and the
development server) that has a language model configured runs one
:class:`Extraction`, so there is nothing more to deploy or watch, and a
worker that dies takes only its leases with it (they run out, and another
worker claims the jobs again). The thread looks for due jobs with a read
(once a second when idle, at once when an ingest in its process queued
one), claims as many as its pool has room for in a write transaction, and
hands them to the pool. How many model calls are in flight on the box,
all workers together, is bounded by the claim itself
(``MEMSVC_LLM_CONCURRENCY``, counted in the database per box name), not by
each worker's pool.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import typing as t
import uuid

from . import clock
from .embeddings import Embedder
from .extraction.llm import ChatModel
from .services import extraction
from .store import Backend

log = logging.getLogger(__name__)

#: Seconds between looks for due jobs when nothing woke the thread.
POLL_SECONDS = 1.0


class Extraction(threading.Thread):
    def __init__(
        self,
        backend: Backend,
        embedder: Embedder,
        settings: t.Mapping[str, t.Any],
        *,
        model: extraction.Model | None = None,
    ):
        super().__init__(name="memsvc-extraction", daemon=True)
        self.backend = backend
        self.embedder = embedder
        self.concurrency: int = settings["LLM_CONCURRENCY"]
        self.model = model or ChatModel(
            settings["LLM_URL"],
            settings["LLM_MODEL"],
            settings["LLM_API_KEY"],
            timeout=settings["LLM_TIMEOUT_SECONDS"],
            pool_size=self.concurrency,
        )
        self.policy = extraction.Policy(
            max_attempts=settings["EXTRACT_MAX_ATTEMPTS"],
            max_chars=settings["MAX_CONTENT_CHARS"],
            backoff_seconds=settings["EXTRACT_BACKOFF_SECONDS"],
        )
        # A claim's lease outlives the model call's timeout by the margin: a dead
        # worker's jobs wait that long, a live worker's call never outlasts its lease.
        self.lease_ms = (
            settings["LLM_TIMEOUT_SECONDS"] + settings["LLM_LEASE_MARGIN_SECONDS"]
        ) * 1000
        self.daily_tokens: int | None = settings["LLM_DAILY_TOKENS"] or None
        self.box = settings["BOX_NAME"] or socket.gethostname()
        self.stopping = threading.Event()
        self.woken = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.concurrency, thread_name_prefix="memsvc-job"
        )

    def wake(self) -> None:
        """A job was queued in this process: look now."""
        self.woken.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                claimed = self.claim()
            except Exception:
                log.exception("claiming extraction jobs failed")
                claimed = []
            for job, owner in claimed:
                self._pool.submit(self._run, job, owner)
            if not claimed:
                self.woken.wait(POLL_SECONDS)
                self.woken.clear()

    def claim(self) -> list[tuple[t.Any, str]]:
        """Due jobs claimed for this worker's free threads, each with its lease's owner."""
        with self._lock:
            room = self.concurrency - self._in_flight
        if room <= 0:
            return []
        store = self.backend.store()
        try:
            now = clock.now_ms()
            with store.read():
                if not store.jobs_due(now):
                    return []
            owner = f"{self.box}/{os.getpid()}/{uuid.uuid4()}"
            with store.write():
                jobs = store.claim_jobs(
                    now,
                    box=self.box,
                    owner=owner,
                    lease_ms=self.lease_ms,
                    max_running=self.concurrency,
                    limit=room,
                    daily_tokens=self.daily_tokens,
                    max_attempts=self.policy.max_attempts,
                )
        finally:
            store.reset()
            self.backend.release()
        with self._lock:
            self._in_flight += len(jobs)
        return [(job, owner) for job in jobs]

    def run_due(self) -> int:
        """Claim and run due jobs in this thread until none is left; how many ran (tests, CLI)."""
        ran = 0
        while claimed := self.claim():
            for job, owner in claimed:
                self._run(job, owner)
                ran += 1
        return ran

    def _run(self, job: t.Any, owner: str) -> None:
        store = self.backend.store()
        try:
            extraction.run(store, self.embedder, self.model, self.policy, job, owner)
        except Exception:
            # The lease runs out and the job is claimed again: never lost.
            log.exception("extraction job %s failed to run", job.id)
        finally:
            store.reset()
            self.backend.release()
            with self._lock:
                self._in_flight -= 1
            self.woken.set()

    def stop(self) -> None:
        self.stopping.set()
        self.woken.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
