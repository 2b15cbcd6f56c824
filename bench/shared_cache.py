"""One copy of a large user's vectors per box: worker memory and search speed, before and after.

Workload (seeded): one user with N = 100,000 memories of 1536-d unit
vectors drawn around 200 topic centroids (as in bench/search.py), stored
through memsvc's store in batches of 1,000, and a user of 10 ("small");
queries drawn the same way. Then the same at 384 dimensions (the bundled
model's), in a database of its own.

1. gunicorn, 2 workers, the checked-in config, embedding through a local
   stand-in for an OpenAI-compatible endpoint (1536-d vectors, no delay; the
   query cache answers repeated queries, so a warm search is the search).
   Twice on the same database: "per worker" (MEMSVC_SEARCH_SHARED_MIN_KB
   above the user's size: each worker holds its own copy, as before) and
   "shared" (the default: the user's snapshot file, mapped by both).
   Both workers first serve searches of the small user (so what a
   worker's first requests set up is not counted as the large user's), and
   memory is read after a maintenance round of each worker (every 2 s
   here, 30 by default), as a worker holds it from one round to the next;
   then searches of the large user are sent until both workers have served
   it, and each worker's /proc/<pid>/smaps_rollup gives its private memory
   (Private_Clean + Private_Dirty: its own pages, and pages of files no
   other process maps), its shared memory and its proportional share
   (Pss), and what its private memory grew by since before its first
   search of the large user; meanwhile both workers' anonymous memory is
   sampled every 5 ms
   (the most each held above its idle while the user was being loaded:
   a private copy of the vectors would show there, whatever became of it
   afterwards). Both servers then stay up, and 200 warm searches over HTTP,
   one at a time, go to each in turn (each server first half of the
   time): p50/p95 and the ratio, both measured under the same load. At 384
   dimensions, the shared server alone: each worker's private memory grown
   for the large user, against its matrix (at most a tenth).
2. In-process, one run: the same search (memsvc.search.search, cache warm)
   with the per-worker cache and with the shared one, queries interleaved
   (each cache first half of the time), p50/p95 and the ratio; the first
   search after a write by another connection (one new memory, 40 times);
   and the very first search of the user (per worker: reading it from the
   database; shared: that, and writing the file).

    python -m bench.shared_cache [--memories 100000] [--queries 200] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import tempfile
import threading
import time
import typing as t
import urllib.parse
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import requests  # noqa: E402

from bench.report import recording  # noqa: E402
from bench.search import draw  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc.models import Memory  # noqa: E402
from memsvc.search import Scope  # noqa: E402
from memsvc.search import SearchCache  # noqa: E402
from memsvc.search import SearchRequest  # noqa: E402
from memsvc.search import search  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import connect  # noqa: E402
from tests.support.fake_provider import UnitProvider  # noqa: E402
from tests.support.servers import start_server  # noqa: E402

DIMS = 1536
#: The bundled model's dimensions: the same user's per-memory costs weigh more beside its
#: matrix (a quarter of the size).
BUNDLED_DIMS = 384
TOPICS = 200
K = 10
#: Seconds between a worker's maintenance rounds, here.
MAINTENANCE = 2
MB = 2**20


def build(path: str, n: int, dims: int = DIMS) -> np.ndarray:
    """The database: one user ("large") with n memories and one ("small") with 10; returns
    the topic centroids."""
    rng = np.random.default_rng(n)
    centroids = rng.standard_normal((TOPICS, dims))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    store = SqliteStore(connect(path))
    store.migrate("openai:fake", dims)
    for start in range(0, n, 1000):
        count = min(1000, n - start)
        memories = [
            Memory(str(uuid.uuid4()), "bench", "large", f"memory {start + i}", {},
                   1_700_000_000_000 + start + i, 1_700_000_000_000 + start + i)
            for i in range(count)
        ]  # fmt: skip
        with store.write():
            store.insert_memories(memories, draw(rng, centroids, count))
    small = [Memory(str(uuid.uuid4()), "bench", "small", f"small {i}", {}, 1, 1) for i in range(10)]
    with store.write():
        store.insert_memories(small, draw(np.random.default_rng(n + 1), centroids, 10))
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.conn.close()
    return centroids


def smaps(pid: int) -> dict[str, float]:
    """A process's smaps_rollup, in MB."""
    out = {}
    for line in pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        out[name] = int(value.split()[0]) / 1024
    return out


def _reads(pid: int) -> int:
    """How many read calls a process has made (a worker reads a request)."""
    for line in pathlib.Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    raise RuntimeError(f"no syscr in /proc/{pid}/io")


def _private(m: dict[str, float]) -> float:
    return m["Private_Clean"] + m["Private_Dirty"]


def workers(pid: int) -> list[int]:
    children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children]


def pct(times: list[float], p: float) -> float:
    return float(np.percentile(times, p)) * 1000


Search = t.Callable[[int, requests.Session], None]


@contextlib.contextmanager
def served(tmp: pathlib.Path, db: str, provider: UnitProvider, matrix_mb: float,
           **settings: str) -> t.Iterator[tuple[list[dict[str, float]], Search]]:  # fmt: skip
    """gunicorn on ``db``: each worker's smaps once both hold the user, and its search."""
    tmp.mkdir()
    env = {
        **provider.settings,
        "MEMSVC_DATABASE": db,
        "MEMSVC_SEARCH_SHARED_DIR": str(tmp / "snapshots"),
        # Room for the user (the default, 256 MB, would search them through the store).
        "MEMSVC_SEARCH_CACHE_MB": "2048",
        "MEMSVC_RATE_LIMIT_PER_MINUTE": "0",
        "MEMSVC_CONCURRENCY_LIMIT": "0",
        # Each worker's maintenance round (which gives freed heap pages back) comes often:
        # memory is measured as the worker holds it from one round to the next.
        "MEMSVC_MAINTENANCE_SECONDS": str(MAINTENANCE),
        **settings,
    }
    server = start_server(tmp, deadline=180, **env)
    try:
        key = server.create_key("bench", "bench")
        texts = [f"question {i}" for i in range(20)]

        def search(i: int, session: requests.Session, user: str = "large") -> None:
            payload = json.dumps({"userId": user, "query": texts[i % len(texts)],
                                  "limit": K, "threshold": 0})  # fmt: skip
            resp = session.get(
                server.trpc + "/memory.search?input=" + urllib.parse.quote(payload),
                headers={"x-api-key": key},
                timeout=300,
            )
            assert resp.status_code == 200, resp.text

        pids = workers(server.proc.pid)
        assert len(pids) == 2, pids
        # Both workers serve the small user first: what a worker's first
        # requests set up (the app's paths, the embedder's client, the query
        # cache) is not the large user's.
        reads = {p: _reads(p) for p in pids}
        deadline = time.monotonic() + 120
        while any(_reads(p) == reads[p] for p in pids):
            assert time.monotonic() < deadline, "a worker served no search"
            threads = [
                threading.Thread(
                    target=lambda: [
                        search(i, requests.Session(), "small") for i in range(len(texts))
                    ]
                )
                for _ in range(4)
            ]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        time.sleep(MAINTENANCE + 1)
        before = {p: smaps(p) for p in pids}
        idle = {p: before[p]["Rss"] for p in pids}
        peak = {p: before[p]["Anonymous"] for p in pids}
        loading = True

        def sample() -> None:
            while loading:
                for p in pids:
                    peak[p] = max(peak[p], smaps(p)["Anonymous"])
                time.sleep(0.005)

        sampler = threading.Thread(target=sample)
        sampler.start()
        # Until both workers hold the user: concurrent searches reach both.
        deadline = time.monotonic() + 600
        try:
            while min(smaps(p)["Rss"] - idle[p] for p in pids) < 0.9 * matrix_mb:
                assert time.monotonic() < deadline, [smaps(p) for p in pids]
                threads = [
                    threading.Thread(
                        target=lambda: [search(i, requests.Session()) for i in range(len(texts))]
                    )
                    for _ in range(4)
                ]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
        finally:
            loading = False
            sampler.join()
        time.sleep(MAINTENANCE + 1)
        memory = [
            {**smaps(p), "idle": _private(before[p]), "peak": peak[p] - before[p]["Anonymous"]}
            for p in pids
        ]
        yield memory, search
    finally:
        server.stop()


def in_process(db: str, centroids: np.ndarray, n_queries: int, tmp: str) -> list[tuple]:
    """Warm search and search after a write: per-worker cache against the shared one."""
    store = SqliteStore(connect(db))
    caches = {
        "per worker": SearchCache(4096 * MB, DIMS),
        "shared": SearchCache(4096 * MB, DIMS, shared_dir=os.path.join(tmp, "in-process")),
    }
    rng = np.random.default_rng(1)
    queries = draw(rng, centroids, n_queries)

    def run(cache: SearchCache, q: np.ndarray) -> list[str]:
        request = SearchRequest("bench", "large", q, "", K, 0.0, Scope(clock.now_ms()))
        found = search(store, cache, request)
        return [r.memory.id for r in found]

    first = {}
    for name, cache in caches.items():
        started = time.perf_counter()
        run(cache, queries[0])
        first[name] = time.perf_counter() - started
    warm: dict[str, list[float]] = {name: [] for name in caches}
    names = list(caches)
    for i, q in enumerate(queries):
        answers = []
        for name in names if i % 2 else names[::-1]:  # each goes first half of the time
            started = time.perf_counter()
            answers.append(run(caches[name], q))
            warm[name].append(time.perf_counter() - started)
        assert answers[0] == answers[1]
    after: dict[str, list[float]] = {name: [] for name in caches}
    writer = SqliteStore(connect(db))
    for i, q in enumerate(queries[:40]):
        with writer.write():
            writer.insert_memories([Memory(str(uuid.uuid4()), "bench", "large", "new", {}, 1, 1)],
                                   q[None, :])  # fmt: skip
        for name in names if i % 2 else names[::-1]:
            cache = caches[name]
            started = time.perf_counter()
            found = run(cache, q)
            after[name].append(time.perf_counter() - started)
            assert found[0] == run(None, q)[0]  # type: ignore[arg-type]
    writer.conn.close()
    store.conn.close()
    base = pct(warm["per worker"], 50)
    base_after = pct(after["per worker"], 50)
    return [
        (name, pct(warm[name], 50), pct(warm[name], 95), pct(warm[name], 50) / base,
         pct(after[name], 50), pct(after[name], 50) / base_after, first[name] * 1000)
        for name in caches
    ]  # fmt: skip


def bundled(tmp: pathlib.Path, n: int) -> list[dict[str, float]]:
    """The large user at :data:`BUNDLED_DIMS`, shared: each worker's memory once both hold it."""
    db = str(tmp / "bundled.sqlite3")
    build(db, n, BUNDLED_DIMS)
    with UnitProvider(BUNDLED_DIMS) as provider:
        matrix_mb = n * BUNDLED_DIMS * 4 / MB
        with served(tmp / "bundled", db, provider, matrix_mb) as (memory, _):
            return memory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    n = args.memories
    matrix_mb = n * DIMS * 4 / MB
    with contextlib.ExitStack() as stack:
        tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        db = str(tmp / "bench.sqlite3")
        started = time.perf_counter()
        centroids = build(db, n)
        print(f"one user, {n:,} memories x {DIMS} dims: matrix {matrix_mb:.0f} MB "
              f"(built in {time.perf_counter() - started:.0f} s)")  # fmt: skip
        provider = stack.enter_context(UnitProvider(DIMS))
        modes = {
            "per worker (before)": {"MEMSVC_SEARCH_SHARED_MIN_KB": str(10**9)},
            "shared (after)": {},
        }
        results: dict[str, list[dict[str, float]]] = {}
        times: dict[str, list[float]] = {name: [] for name in modes}
        with contextlib.ExitStack() as servers:
            searches: dict[str, Search] = {}
            for i, (name, settings) in enumerate(modes.items()):
                results[name], searches[name] = servers.enter_context(
                    served(tmp / f"server{i}", db, provider, matrix_mb, **settings)
                )
            sessions = {name: requests.Session() for name in modes}
            names = list(modes)
            for i in range(args.queries):
                for name in names if i % 2 else names[::-1]:  # each goes first half of the time
                    started = time.perf_counter()
                    searches[name](i, sessions[name])
                    times[name].append(time.perf_counter() - started)
        print()
        print("gunicorn, 2 workers: each worker's memory once both have searched the user (MB)")
        print(f"{'cache':<22}{'worker':>7}{'Rss':>7}{'Shared':>8}{'Private':>9}{'(dirty':>8}"
              f"{'clean)':>8}{'Pss':>6}{'idle':>6}{'added':>7}{'added/matrix':>14}"
              f"{'load peak':>11}")  # fmt: skip
        for name, memory in results.items():
            for w, m in enumerate(memory):
                private = _private(m)
                shared = m["Shared_Clean"] + m["Shared_Dirty"]
                added = private - m["idle"]
                print(f"{name:<22}{w + 1:>7}{m['Rss']:>7.0f}{shared:>8.0f}{private:>9.0f}"
                      f"{m['Private_Dirty']:>8.0f}{m['Private_Clean']:>8.0f}{m['Pss']:>6.0f}"
                      f"{m['idle']:>6.0f}{added:>7.0f}{added / matrix_mb:>14.1%}"
                      f"{m['peak']:>11.0f}")  # fmt: skip
        print("(idle: the worker's private memory before its first search; added: since; "
              "load peak: the most anonymous memory it held above idle while the user was "
              "loaded)")  # fmt: skip
        print()
        print(f"gunicorn, warm memory.search over HTTP ({args.queries} one at a time, "
              f"the servers in turn, top {K})")  # fmt: skip
        print(f"{'cache':<22}{'p50 ms':>9}{'p95 ms':>9}{'x before':>10}")
        base = pct(times["per worker (before)"], 50)
        for name, took in times.items():
            print(f"{name:<22}{pct(took, 50):>9.2f}{pct(took, 95):>9.2f}"
                  f"{pct(took, 50) / base:>10.2f}")  # fmt: skip
        print()
        small_mb = n * BUNDLED_DIMS * 4 / MB
        print(f"gunicorn, 2 workers, shared, {BUNDLED_DIMS} dims (matrix {small_mb:.0f} MB): "
              "each worker's private memory once both have searched the user (MB)")  # fmt: skip
        print(f"{'worker':>7}{'Private':>9}{'idle':>6}{'added':>7}{'added/matrix':>14}"
              f"{'load peak':>11}")  # fmt: skip
        for w, m in enumerate(bundled(tmp, n)):
            added = _private(m) - m["idle"]
            print(f"{w + 1:>7}{_private(m):>9.0f}{m['idle']:>6.0f}{added:>7.0f}"
                  f"{added / small_mb:>14.1%}{m['peak']:>11.0f}")  # fmt: skip
        print()
        print(f"in-process, memsvc.search.search ({args.queries} queries, interleaved)")
        print(f"{'cache':<22}{'warm p50':>9}{'warm p95':>9}{'x before':>10}"
              f"{'after write p50':>17}{'x before':>10}{'first ms':>10}")  # fmt: skip
        for name, p50, p95, ratio, after, after_ratio, first in in_process(
            db, centroids, args.queries, str(tmp)
        ):
            label = name + (" (before)" if name == "per worker" else " (after)")
            print(f"{label:<22}{p50:>9.2f}{p95:>9.2f}{ratio:>10.2f}{after:>17.2f}"
                  f"{after_ratio:>10.2f}{first:>10.0f}")  # fmt: skip


if __name__ == "__main__":
    with recording("shared_cache"):
        main()
