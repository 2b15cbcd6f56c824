"""Prometheus metrics: what memsvc counts, and ``/metrics``.

Off unless ``MEMSVC_METRICS_TOKEN`` or ``MEMSVC_METRICS_BIND`` is set: then
nothing here imports prometheus_client, and every hook returns at once.

Under gunicorn each worker counts in files of its own, in a folder made
for this server start (:func:`prepare_multiprocess_dir`, called by the
gunicorn settings before the app is loaded), which ``/metrics`` sums: the
numbers are the server's, whichever worker answers the scrape. A worker
that exits leaves its files; its counters keep counting in the sum, and its
gauges are dropped (:func:`worker_exited`). The folder is removed when the
server stops.

Labels are bounded: procedures are the declared ones (anything else is
``unknown``), codes are the API's error codes, and no label ever carries a
user id, a tenant, a key or text.
"""

from __future__ import annotations

import hmac
import logging
import os
import shutil
import tempfile
import threading
import time
import typing as t

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Seconds: from a cached query's search (a few ms) to a slow provider's retries.
JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 86400)
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100)

#: The reasons a call is refused with 429 (``TooManyRequests.reason``).
REFUSAL_REASONS = ("rate", "concurrency", "cost", "tenant_keys")

_lock = threading.Lock()
_metrics: _Metrics | None = None


def enabled(config: t.Mapping[str, t.Any]) -> bool:
    """Whether these settings turn metrics on (a token or an address to scrape)."""
    return bool(config.get("METRICS_TOKEN") or config.get("METRICS_BIND"))


def prepare_multiprocess_dir() -> str:
    """A new, empty folder for this server's metric files, named in the environment.

    Called in gunicorn's master before the app (and prometheus_client) is
    loaded, so that the workers it forks count into it.
    """
    path = tempfile.mkdtemp(prefix="memsvc-metrics-")
    os.environ[MULTIPROC_ENV] = path
    return path


def remove_multiprocess_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if os.environ.get(MULTIPROC_ENV) == path:
        del os.environ[MULTIPROC_ENV]


def worker_exited(pid: int) -> None:
    """gunicorn's ``child_exit``: drop a dead worker's live gauges (its counters stay)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


class _Metrics:
    def __init__(self, procedures: t.Iterable[str]) -> None:
        import prometheus_client as p

        self.p = p
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        # Never the global registry: several apps in one process (tests)
        # share these metrics, and the multiprocess collector reads files.
        self.registry = p.CollectorRegistry(auto_describe=True)
        reg = None if self.multiprocess else self.registry

        def counter(name: str, doc: str, labels: t.Sequence[str] = ()) -> t.Any:
            return p.Counter(name, doc, labels, registry=reg)

        def histogram(name: str, doc: str, labels: t.Sequence[str], buckets: t.Any) -> t.Any:
            return p.Histogram(name, doc, labels, registry=reg, buckets=buckets)

        def gauge(name: str, doc: str, mode: str, labels: t.Sequence[str] = ()) -> t.Any:
            return p.Gauge(name, doc, labels, registry=reg, multiprocess_mode=mode)  # type: ignore[arg-type]

        self.calls = counter(
            "memsvc_calls_total", "tRPC procedure calls answered, by procedure and code.",
            ["procedure", "code"],
        )  # fmt: skip
        self.duration = histogram(
            "memsvc_call_duration_seconds", "Time to answer a tRPC call, by procedure.",
            ["procedure"], DURATION_BUCKETS,
        )  # fmt: skip
        self.batches = histogram(
            "memsvc_batch_calls", "Calls per batch request (?batch=1).", [], BATCH_BUCKETS
        )
        self.embedding_calls = counter(
            "memsvc_embedding_calls_total", "Calls to the embedding model or provider.",
            ["provider"],
        )  # fmt: skip
        self.embedding_failures = counter(
            "memsvc_embedding_failures_total", "Embedding calls that failed.", ["provider"]
        )
        self.embedding_duration = histogram(
            "memsvc_embedding_duration_seconds", "Time of one embedding call.", ["provider"],
            DURATION_BUCKETS,
        )  # fmt: skip
        self.embedding_texts = counter(
            "memsvc_embedding_texts_total", "Texts (or windows) embedded.", ["provider"]
        )
        self.query_cache_hits = counter(
            "memsvc_query_cache_hits_total", "Search queries whose embedding was remembered."
        )
        self.query_cache_misses = counter(
            "memsvc_query_cache_misses_total", "Search queries that had to be embedded."
        )
        self.searches = counter(
            "memsvc_searches_total",
            "Searches, by mode and path: 'snapshot' (the worker's cached vectors) or 'store'.",
            ["mode", "path"],
        )
        # A counter, not a histogram: one increment per search. Per search:
        # rate(memsvc_search_candidates_total) / rate(memsvc_searches_total).
        self.candidates = counter(
            "memsvc_search_candidates_total", "Candidate memories ranked exactly by searches."
        )
        self.cache_bytes = gauge(
            "memsvc_search_cache_bytes", "Memory the search caches hold, all workers.", "livesum"
        )
        self.cache_users = gauge(
            "memsvc_search_cache_users", "Users whose vectors the search caches hold.", "livesum"
        )
        self.refusals = counter(
            "memsvc_limiter_refusals_total", "Calls refused with 429, by reason.", ["reason"]
        )
        self.storage_failures = counter(
            "memsvc_storage_failures_total", "Calls the storage failed (503, or uncounted)."
        )
        self.memories = gauge(
            "memsvc_memories", "Memories stored (sampled every maintenance round).",
            "livemostrecent",
        )  # fmt: skip
        self.end_users = gauge(
            "memsvc_end_users", "End users with memories (sampled).", "livemostrecent"
        )
        self.api_keys = gauge("memsvc_api_keys", "Active API keys (sampled).", "livemostrecent")
        self.purged = counter(
            "memsvc_expired_memories_purged_total", "Expired memories removed for good."
        )
        self.key_operations = counter(
            "memsvc_key_operations_total", "API key operations through the keys router.",
            ["operation"],
        )  # fmt: skip
        self.pool_size = gauge(
            "memsvc_postgres_pool_connections", "PostgreSQL connections open, all workers.",
            "livesum",
        )  # fmt: skip
        self.pool_available = gauge(
            "memsvc_postgres_pool_available", "PostgreSQL connections idle in the pools.",
            "livesum",
        )  # fmt: skip
        self.pool_waiting = gauge(
            "memsvc_postgres_pool_waiting", "Threads waiting for a PostgreSQL connection.",
            "livesum",
        )  # fmt: skip
        self.llm_tokens = counter(
            "memsvc_llm_tokens_total",
            "Language-model tokens spent by extraction jobs, by tenant and kind "
            "(prompt, completion).",
            ["tenant", "kind"],
        )
        self.llm_calls = counter(
            "memsvc_llm_calls_total",
            "Model calls made by extraction jobs, by outcome (ok, retry, failed, invalid).",
            ["outcome"],
        )
        self.job_seconds = histogram(
            "memsvc_job_duration_seconds",
            "From a job's queueing to its end (done or failed).",
            ["status"],
            JOB_BUCKETS,
        )
        self.jobs = gauge(
            "memsvc_jobs", "Extraction jobs by status (sampled every maintenance round).",
            "livemostrecent", ["status"],
        )  # fmt: skip
        # Pre-bound children: a call's update is two lookups in a dict.
        self._procedures = set(procedures)
        self._bound: dict[tuple[str, str], tuple[t.Any, t.Any]] = {}
        self._searches: dict[tuple[str, str], t.Any] = {}
        self._refusals = {r: self.refusals.labels(r) for r in REFUSAL_REASONS}
        self._providers: dict[str, tuple[t.Any, t.Any, t.Any, t.Any]] = {}
        self._batches = self.batches
        self._candidates = self.candidates

    def call(self, procedure: str, code: str) -> tuple[t.Any, t.Any]:
        bound = self._bound.get((procedure, code))
        if bound is None:
            # Paths no procedure has are the caller's text: never a key here.
            name = procedure if procedure in self._procedures else "unknown"
            bound = self._bound.get((name, code))
            if bound is None:
                bound = self._bound[(name, code)] = (
                    self.calls.labels(name, code),
                    self.duration.labels(name),
                )
        return bound

    def provider(self, name: str) -> tuple[t.Any, t.Any, t.Any, t.Any]:
        bound = self._providers.get(name)
        if bound is None:
            bound = self._providers[name] = (
                self.embedding_calls.labels(name),
                self.embedding_failures.labels(name),
                self.embedding_duration.labels(name),
                self.embedding_texts.labels(name),
            )
        return bound

    def exposition(self) -> bytes:
        if self.multiprocess:
            from prometheus_client import multiprocess

            registry = self.p.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return self.p.generate_latest(registry)
        return self.p.generate_latest(self.registry)


def setup(procedures: t.Iterable[str]) -> None:
    """Turn metrics on in this process, once; a later app's procedures are added."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = _Metrics(procedures)
        else:
            _metrics._procedures.update(procedures)


def active() -> bool:
    return _metrics is not None


def exposition() -> bytes:
    assert _metrics is not None
    return _metrics.exposition()


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries the metrics token (no token: anyone)."""
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


# -- hooks: each returns at once when metrics are off ---------------------------------


def call(procedure: str, code: str, seconds: float) -> None:
    m = _metrics
    if m is not None:
        calls, duration = m.call(procedure, code)
        calls.inc()
        duration.observe(seconds)


def batch(calls: int) -> None:
    m = _metrics
    if m is not None:
        m._batches.observe(calls)


def refused(reason: str) -> None:
    """A call refused with 429 by one of :data:`REFUSAL_REASONS` (``TooManyRequests.reason``)."""
    m = _metrics
    if m is not None:
        m._refusals[reason if reason in REFUSAL_REASONS else "rate"].inc()


def storage_failure() -> None:
    m = _metrics
    if m is not None:
        m.storage_failures.inc()


def searched(mode: str, from_snapshot: bool) -> None:
    m = _metrics
    if m is not None:
        key = (mode, "snapshot" if from_snapshot else "store")
        child = m._searches.get(key)
        if child is None:
            child = m._searches[key] = m.searches.labels(*key)
        child.inc()


def ranked(candidates: int) -> None:
    m = _metrics
    if m is not None:
        m._candidates.inc(candidates)


def query_cache(hits: int, misses: int) -> None:
    m = _metrics
    if m is not None:
        if hits:
            m.query_cache_hits.inc(hits)
        if misses:
            m.query_cache_misses.inc(misses)


def purged(removed: int) -> None:
    m = _metrics
    if m is not None and removed:
        m.purged.inc(removed)


def key_operation(operation: str) -> None:
    m = _metrics
    if m is not None:
        m.key_operations.labels(operation).inc()


E = t.TypeVar("E")


def instrument_embedder(embedder: E, provider: str) -> E:
    """Count and time ``embedder.embed`` calls (in place; a no-op with metrics off)."""
    m = _metrics
    if m is None:
        return embedder
    inner = embedder.embed  # type: ignore[attr-defined]
    calls, failures, duration, texts = m.provider(provider)

    def embed(items: t.Sequence[str], *args: t.Any, **kwargs: t.Any) -> t.Any:
        started = time.perf_counter()
        calls.inc()
        try:
            out = inner(items, *args, **kwargs)
        except BaseException:
            failures.inc()
            raise
        finally:
            duration.observe(time.perf_counter() - started)
        texts.inc(len(items))
        return out

    embedder.embed = embed  # type: ignore[attr-defined]
    return embedder


def model_call(tenant: str, outcome: str, prompt_tokens: int, completion_tokens: int) -> None:
    """One extraction model call: its outcome and the tokens it took."""
    m = _metrics
    if m is None:
        return
    m.llm_calls.labels(outcome).inc()
    if prompt_tokens:
        m.llm_tokens.labels(tenant, "prompt").inc(prompt_tokens)
    if completion_tokens:
        m.llm_tokens.labels(tenant, "completion").inc(completion_tokens)


def job_ended(status: str, seconds: float) -> None:
    m = _metrics
    if m is not None:
        m.job_seconds.labels(status).observe(seconds)


def sample(backend: t.Any, search_cache: t.Any) -> None:
    """Every maintenance round: the gauges worth a query or two (cheap, per worker)."""
    m = _metrics
    if m is None:
        return
    if search_cache is not None:
        m.cache_bytes.set(search_cache.nbytes)
        m.cache_users.set(search_cache.users())
    pool = getattr(getattr(backend, "db", None), "_pool", None)
    if pool is not None:
        stats = pool.get_stats()
        m.pool_size.set(stats.get("pool_size", 0))
        m.pool_available.set(stats.get("pool_available", 0))
        m.pool_waiting.set(stats.get("requests_waiting", 0))
    store = backend.store()
    try:
        with store.read():
            memories, users, keys = store._one(
                "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM memory_users), "
                "(SELECT count(*) FROM api_keys WHERE revoked_at IS NULL)"
            )
        m.memories.set(memories)
        m.end_users.set(users)
        m.api_keys.set(keys)
        with store.read():
            counted = store.job_counts()
        for status in ("queued", "running", "done", "failed"):
            m.jobs.labels(status).set(counted.get(status, 0))
    finally:
        store.reset()
        backend.release()
