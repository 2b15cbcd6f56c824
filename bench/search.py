"""Exact search speed against a raw numpy scan, on a fixed synthetic workload.

Workload (seeded): 1536-d unit vectors drawn around 200 topic centroids (a
memory is normalize(c + g/sqrt(1536)), queries are drawn the same way), one
large user with N memories among 2,000 small users with 20 memories each,
all inserted interleaved, in random order, as they would arrive.

For N = 10,000 and N = 100,000 it measures, in one process and one run:

  numpy          the baseline: the large user's float32 matrix in memory,
                 scored with one matrix-vector product, top 10 by argpartition
  memsvc         the search path (service + store, embedding excluded) with
                 the in-memory cache warm: read the user's change counters,
                 scan, rank exactly, fetch the 10 memories
  memsvc cold    the same right after a write by another connection to that
                 user (the cache appends the new memory)
  sqlite-vec     the uncached path: sqlite-vec KNN + exact ranking

p50/p95 latency for the large user and for small users, recall@10 against
float64 brute force (same ids; similarities equal to 1e-9), bulk insert rate
(store, in batches of 1,000 per transaction), bytes on disk per vector, and
the process's private resident memory (one worker's worth). Ratios are to
numpy.

    python -m bench.search [--sizes 10000,100000] [--queries 50]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid

# As memsvc runs (memsvc/__init__.py): one BLAS thread, set before numpy
# loads. Two threads on two cores made the same scan 2-3x slower and noisy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench.report import recording  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc.models import Memory  # noqa: E402
from memsvc.search import Scope  # noqa: E402
from memsvc.search import SearchCache  # noqa: E402
from memsvc.search import SearchRequest  # noqa: E402
from memsvc.search import search  # noqa: E402
from memsvc.search.exact import exact_similarity  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import connect  # noqa: E402

DIMS = 1536
TOPICS = 200
SMALL_USERS = 2000
SMALL_MEMORIES = 20
K = 10


def draw(rng: np.random.Generator, centroids: np.ndarray, n: int) -> np.ndarray:
    dims = centroids.shape[1]
    c = centroids[rng.integers(0, len(centroids), n)]
    v = c + rng.standard_normal((n, dims)) / np.sqrt(dims)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def rss_mb() -> float:
    """This process's private resident memory (RssAnon), in MB.

    Pages of the memory-mapped database count in VmRSS too, but they are
    the kernel's page cache, shared by every worker; RssAnon is what one
    worker costs on its own.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pct(times: list[float], p: float) -> float:
    return float(np.percentile(times, p)) * 1000


def build(path: str, n_large: int, seed: int) -> tuple[SqliteStore, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((TOPICS, DIMS))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    owners = np.concatenate(
        [np.full(n_large, -1), np.repeat(np.arange(SMALL_USERS), SMALL_MEMORIES)]
    )
    rng.shuffle(owners)
    store = SqliteStore(connect(path, mmap_mb=1024))  # memsvc's default
    store.migrate("bench:random", DIMS)
    started = time.perf_counter()
    for start in range(0, len(owners), 1000):
        batch = owners[start : start + 1000]
        vectors = draw(rng, centroids, len(batch))
        memories = [
            Memory(
                str(uuid.uuid4()),
                "tenant",
                "large" if owner < 0 else f"small-{owner}",
                f"memory {start + i}",
                {},
                1_700_000_000_000 + start + i,
                1_700_000_000_000 + start + i,
            )
            for i, owner in enumerate(batch)
        ]
        with store.write():
            store.insert_memories(memories, vectors)
    rate = len(owners) / (time.perf_counter() - started)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return store, centroids, rate


def time_calls(fn, queries) -> tuple[list[float], list]:
    times, results = [], []
    for q in queries:
        started = time.perf_counter()
        results.append(fn(q))
        times.append(time.perf_counter() - started)
    return times, results


def run(n_large: int, n_queries: int, directory: str) -> list[tuple]:
    path = os.path.join(directory, f"bench-{n_large}.sqlite3")
    store, centroids, insert_rate = build(path, n_large, seed=n_large)
    total = n_large + SMALL_USERS * SMALL_MEMORIES
    bytes_per_vector = os.path.getsize(path) / total
    rng = np.random.default_rng(1)
    queries = draw(rng, centroids, n_queries)
    rss_before = rss_mb()

    # Baseline: the large user's matrix, scanned by numpy.
    entries = store.entries("tenant", "large")  # one window each: a vector per memory
    seqs = np.array([e.seq for e in entries], dtype=np.int64)
    vids = np.array([e.first_vid for e in entries], dtype=np.int64)
    matrix = store.vectors("tenant", "large", vids, whole_user=True)
    held = {"matrix": np.ascontiguousarray(matrix)}
    matrix = held["matrix"]

    def numpy_scan(q):
        scores = held["matrix"] @ q
        top = np.argpartition(-scores, K)[:K]
        return seqs[top[np.argsort(-scores[top])]]

    numpy_scan(queries[0])
    base_times, _ = time_calls(numpy_scan, queries)

    # Ground truth: float64 over the same stored vectors.
    truth = []
    for q in queries:
        sims = exact_similarity(matrix, q)
        top = np.lexsort((-seqs, -sims))[:K]
        truth.append((list(seqs[top]), sims[top]))
    held.clear()  # so that the RSS below is memsvc's own
    del matrix

    cache = SearchCache(4096 * 2**20, DIMS)

    def scope() -> Scope:
        return Scope(clock.now_ms())

    def memsvc(q, user="large"):
        found = search(store, cache, SearchRequest("tenant", user, q, "", K, 0.0, scope()))
        return [(r.memory, r.similarity) for r in found]

    def sqlite_vec(q, user="large"):
        found = search(store, None, SearchRequest("tenant", user, q, "", K, 0.0, scope()))
        return [(r.memory, r.similarity) for r in found]

    load_started = time.perf_counter()
    memsvc(queries[0])
    cold_load = time.perf_counter() - load_started
    warm_times, warm_results = time_calls(memsvc, queries)
    rss_after = rss_mb()

    def recall(results) -> tuple[float, float]:
        """Share of the true top 10 found, and the largest similarity difference."""
        hits, worst = 0, 0.0
        for found, (ids, expected) in zip(results, truth, strict=True):
            got = [
                store.conn.execute("SELECT seq FROM memories WHERE id = ?", (m.id,)).fetchone()[0]
                for m, _ in found
            ]
            hits += len(set(got) & set(ids))
            worst = max(worst, max(abs(s - e) for (_, s), e in zip(found, expected, strict=True)))
        return hits / (K * len(results)), worst

    warm_recall, warm_err = recall(warm_results)

    # After a write through another connection: the next search must see it.
    writer = SqliteStore(connect(path))
    cold_times = []
    for q in queries[:10]:
        with writer.write():
            writer.insert_memories(
                [Memory(str(uuid.uuid4()), "tenant", "large", "new", {}, 1, 1)], q[None, :]
            )
        started = time.perf_counter()
        found = memsvc(q)
        cold_times.append(time.perf_counter() - started)
        assert found[0][0].content == "new" and found[0][1] > 0.999999
    writer.conn.close()

    vec_queries = queries[: max(5, n_queries // 5)]
    vec_times, _ = time_calls(sqlite_vec, vec_queries)

    small_users = [f"small-{u}" for u in rng.integers(0, SMALL_USERS, n_queries)]
    small_cold, small_warm = [], []
    for q, user in zip(queries, small_users, strict=True):
        for bucket in (small_cold, small_warm):  # first search loads the user
            started = time.perf_counter()
            memsvc(q, user)
            bucket.append(time.perf_counter() - started)
    store.conn.close()
    os.remove(path)

    base = pct(base_times, 50)
    rows = [
        (n_large, "numpy scan (baseline)", pct(base_times, 50), pct(base_times, 95), 1.0, "", ""),
        (
            n_large,
            "memsvc, cache warm",
            pct(warm_times, 50),
            pct(warm_times, 95),
            pct(warm_times, 50) / base,
            f"{warm_recall:.3f}",
            f"{warm_err:.1e}",
        ),
        (
            n_large,
            "memsvc, after a write",
            pct(cold_times, 50),
            pct(cold_times, 95),
            pct(cold_times, 50) / base,
            "",
            "",
        ),
        (
            n_large,
            "sqlite-vec (no cache)",
            pct(vec_times, 50),
            pct(vec_times, 95),
            pct(vec_times, 50) / base,
            "",
            "",
        ),
        (n_large, "small user, warm", pct(small_warm, 50), pct(small_warm, 95), None, "", ""),
        (
            n_large,
            "small user, first search",
            pct(small_cold, 50),
            pct(small_cold, 95),
            None,
            "",
            "",
        ),
    ]
    extra = (
        f"N={n_large}: bulk insert {insert_rate:,.0f} memories/s; "
        f"{bytes_per_vector:,.0f} bytes on disk per vector ({bytes_per_vector / (DIMS * 4):.2f}x "
        f"the float32 vector); first load of the large user {cold_load * 1000:.0f} ms; "
        f"private RSS {rss_before:.0f} MB before the cache, {rss_after:.0f} MB with it"
    )
    return rows, extra


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    print(
        f"{'N':>7}  {'path':<26}{'p50 ms':>9}{'p95 ms':>9}{'x numpy':>9}{'recall@10':>11}"
        f"{'max sim err':>12}"
    )
    notes = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            rows, extra = run(size, args.queries, tmp)
            for n, name, p50, p95, ratio, rec, err in rows:
                r = "" if ratio is None else f"{ratio:.2f}"
                print(f"{n:>7}  {name:<26}{p50:>9.2f}{p95:>9.2f}{r:>9}{rec:>11}{err:>12}")
            notes.append(extra)
    for note in notes:
        print(note)


if __name__ == "__main__":
    with recording("search"):
        main()
