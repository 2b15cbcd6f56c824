"""What the memory lifecycle costs: filtered search, erasing a user, export and import.

Workload (seeded): 384-d unit vectors (the bundled model's size) drawn
around 50 topic centroids; one user with 10,000 memories among 500 users
with 20 each (``--small-users``), every memory a text of 30 words drawn
from a 5,000-word vocabulary with Zipf frequencies (the keyword index's
cost depends on the words) and metadata ``{"bucket": i % 100, "kind":
"a"|"b", "tags": [...]}``. Embedding is excluded throughout: the search path
is memsvc's own (:func:`memsvc.search.search`), in one process.

1. Filtered search, cache warm: p50/p95 of an unfiltered search and of
   searches whose filter matches 1% (``bucket == 7``) and 50% (``kind ==
   "a"``) of the user, ratio to the unfiltered p50 measured in the same run;
   also the first filtered search after a write (the user's metadata
   columns are rebuilt), and the uncached path.
2. ``deleteAll`` of the 10,000-memory user (service call: vectors, keyword
   index rows, history and the user's row in one transaction), median of 3
   rebuilds; ``deleteAll`` of a 20-memory user and one single delete for
   comparison.
3. ``memsvc export`` and ``memsvc import`` of the whole database: memories/s.

    python -m bench.lifecycle [--queries 50] [--small-users 500]
    python -m bench.lifecycle_postgres [...]   the same on PostgreSQL
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import random
import tempfile
import time
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench.report import recording  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc import settings  # noqa: E402
from memsvc.embeddings import Embedder  # noqa: E402
from memsvc.models import Memory  # noqa: E402
from memsvc.search import Scope  # noqa: E402
from memsvc.search import SearchCache  # noqa: E402
from memsvc.search import SearchRequest  # noqa: E402
from memsvc.search import filters  # noqa: E402
from memsvc.search import search as run_search  # noqa: E402
from memsvc.services import memories as service  # noqa: E402
from memsvc.services import transfer  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import Store  # noqa: E402
from memsvc.store import connect  # noqa: E402

DIMS = 384
TOPICS = 50
LARGE = 10_000
SMALL = 20
WORDS = [f"w{i:04d}" for i in range(5000)]
ZIPF = list(itertools.accumulate(1 / (i + 1) for i in range(len(WORDS))))


class Fixed(Embedder):
    """An embedder for import: never called, the vectors come from the file."""

    model_id = "bench:random"
    dimensions = DIMS

    def embed(self, texts):  # pragma: no cover - the file's model matches
        raise AssertionError("import should not embed")

    def warm_up(self) -> None:
        pass


def draw(rng: np.random.Generator, centroids: np.ndarray, n: int) -> np.ndarray:
    v = centroids[rng.integers(0, len(centroids), n)] + rng.standard_normal((n, DIMS)) / 8
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def text(user: str, i: int) -> str:
    return " ".join(random.Random(f"{user}/{i}").choices(WORDS, cum_weights=ZIPF, k=30))


def memory(user: str, i: int) -> Memory:
    meta = {"bucket": i % 100, "kind": "a" if i % 2 else "b", "tags": [f"t{i % 7}"]}
    return Memory(str(uuid.uuid4()), "bench", user, text(user, i), meta, i, i)


def fill(store: Store, rng: np.random.Generator, centroids: np.ndarray, small_users: int) -> None:
    batch: list[Memory] = []
    for i in range(LARGE):
        batch.append(memory("large", i))
    for u in range(small_users):
        batch += [memory(f"small-{u}", i) for i in range(SMALL)]
    for start in range(0, len(batch), 1000):
        part = batch[start : start + 1000]
        with store.write():
            store.insert_memories(part, draw(rng, centroids, len(part)))


def pct(times: list[float], p: float) -> float:
    return float(np.percentile(times, p)) * 1000


def timed(fn, queries) -> list[float]:
    out = []
    for q in queries:
        started = time.perf_counter()
        fn(q)
        out.append(time.perf_counter() - started)
    return out


def open_store(tmp: str, name: str, postgres: bool) -> Store:
    """A new, empty database: a SQLite file in ``tmp``, or one on the tests' PostgreSQL."""
    if postgres:
        from tests.support import postgres as pg
        from tests.support.stores import open_store as open_url

        store = open_url(pg.fresh_database(f"bench_lifecycle_{name}"))
    else:
        store = SqliteStore(connect(f"{tmp}/{name}.sqlite3", mmap_mb=1024))
    store.migrate(Fixed.model_id, DIMS)
    return store


def main(postgres: bool = False) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--small-users", type=int, default=500)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    centroids = rng.standard_normal((TOPICS, DIMS))
    queries = draw(rng, centroids, args.queries)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(tmp, "bench", postgres)
        started = time.perf_counter()
        fill(store, rng, centroids, args.small_users)
        store.refresh_statistics()  # on PostgreSQL, what autovacuum does within minutes
        filled = time.perf_counter() - started
        total = LARGE + args.small_users * SMALL
        cache = SearchCache(1024 * 2**20, DIMS)

        def search(flt=None, cached=True):
            scope = Scope(clock.now_ms(), filters.parse(flt) if flt else None)
            return lambda q: run_search(
                store,
                cache if cached else None,
                SearchRequest("bench", "large", q, "", 10, 0.0, scope),
            )

        cases = [
            ("unfiltered", None),
            ("filter matching 1%", {"bucket": 7}),
            ("filter matching 50%", {"kind": "a"}),
        ]
        for _, flt in cases:  # warm: the user loaded, the filter's columns built
            search(flt)(queries[0])
        rows = []
        base = 0.0
        for name, flt in cases:
            times = timed(search(flt), queries)
            base = base or pct(times, 50)
            found = len(search(flt)(queries[0]))
            rows.append((f"{name}, cache warm", times, found))
        # The first filtered search after a write: the columns are rebuilt.
        after = []
        for i, q in enumerate(queries[:10]):
            with store.write():
                store.insert_memories([memory("large", LARGE + i)], draw(rng, centroids, 1))
            started = time.perf_counter()
            search({"kind": "a"})(q)
            after.append(time.perf_counter() - started)
        rows.append(("filter 50%, first after a write", after, 10))
        rows.append(
            ("filter matching 1%, no cache", timed(search({"bucket": 7}, False), queries[:10]), 10)
        )
        rows.append(("unfiltered, no cache", timed(search(None, False), queries[:10]), 10))

        print(
            f"user with {LARGE:,} memories among {total:,}, {DIMS} dimensions, "
            f"{args.queries} queries, k=10 (inserted in {filled:.1f}s)"
        )
        print(f"{'search':<36}{'p50 ms':>9}{'p95 ms':>9}{'x unfiltered':>14}{'found':>7}")
        for name, times, found in rows:
            print(
                f"{name:<36}{pct(times, 50):>9.2f}{pct(times, 95):>9.2f}"
                f"{pct(times, 50) / base:>14.2f}{found:>7}"
            )

        # -- export and import ------------------------------------------------------------
        exported = io.StringIO()
        started = time.perf_counter()
        n = transfer.export(store, exported).memories
        export_s = time.perf_counter() - started
        lines = exported.getvalue().splitlines(keepends=True)
        target = open_store(tmp, "imported", postgres)
        limits = transfer.Rules.from_settings(settings.DEFAULTS, None)
        checked = transfer.check(target, lines, limits)
        started = time.perf_counter()
        result = transfer.import_(target, Fixed(), lines, checked, limits)
        import_s = time.perf_counter() - started
        size = len(exported.getvalue().encode())
        print()
        print(
            f"export: {n:,} memories in {export_s:.2f}s ({n / export_s:,.0f}/s, "
            f"{size / 1e6:.0f} MB of JSON Lines)"
        )
        print(
            f"import: {result.imported:,} memories in {import_s:.2f}s "
            f"({result.imported / import_s:,.0f}/s, vectors from the file)"
        )

        # -- erasing a user ---------------------------------------------------------------
        single = []
        for _ in range(20):
            with store.read():
                [(seq, m)] = list(store.page("bench", "small-0", clock.now_ms()))[:1]
            started = time.perf_counter()
            service.delete(store, "bench", m.id)
            single.append(time.perf_counter() - started)
            with store.write():
                store.insert_memories([memory("small-0", 0)], draw(rng, centroids, 1))
        small = []
        for u in range(1, min(21, args.small_users)):
            started = time.perf_counter()
            service.delete_all(store, "bench", f"small-{u}", cache)
            small.append(time.perf_counter() - started)
        erase = []
        for round_ in range(3):
            if round_:
                batch = [memory("large", i) for i in range(LARGE)]
                for start in range(0, LARGE, 1000):
                    with store.write():
                        part = batch[start : start + 1000]
                        store.insert_memories(part, draw(rng, centroids, len(part)))
            search()(queries[0])  # the user cached, as in a running worker
            started = time.perf_counter()
            deleted = service.delete_all(store, "bench", "large", cache)
            erase.append(time.perf_counter() - started)
        print()
        print(
            f"deleteAll of a {deleted:,}-memory user: median {np.median(erase) * 1000:.0f} ms "
            f"(runs: {', '.join(f'{s * 1000:.0f}' for s in erase)} ms)"
        )
        print(
            f"deleteAll of a {SMALL}-memory user: p50 {pct(small, 50):.1f} ms; "
            f"one delete: p50 {pct(single, 50):.2f} ms"
        )
        for opened in (store, target):
            opened.conn.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    with recording("lifecycle"):
        main()
