"""PostgreSQL against SQLite: search latency in-process, and throughput through app servers.

Everything runs in one process tree and one run, and every figure is
printed as a ratio to a baseline measured in the same run, the paths
compared taking turns query by query (or round by round): this box is
small and noisy, so the ratios are what to compare across machines.

Part 1, search in-process, on the workload of bench/search.py: 1536-d
unit vectors around 200 topic centroids, one large user with N memories
among 2,000 small users of 20, inserted interleaved in batches of 1,000
per transaction (``insert_memories``). The same memories go into SQLite
(``SqliteStore``, memory-mapped as memsvc opens it) and into PostgreSQL
(``PgStore`` on a connection of its own: the tests' private PostgreSQL 16
with pgvector, on a unix socket). Paths:

  numpy scan (baseline)     the large user's float32 matrix, one
                            matrix-vector product, top 10 by argpartition
  memsvc, cache warm        memsvc.search.search with the cache warm,
                            embedding excluded: counters, scan, exact
                            rank, rows
  memsvc, after a write     the same right after another connection added
                            a memory to that user (the cache appends it)
  sqlite-vec / pgvector <=> search with cache=None: sqlite-vec's KNN on
   (no cache)               SQLite, pgvector's exact ORDER BY embedding
                            <=> q on PostgreSQL (PgStore.knn)
  pgvector SQL, one query   for reference, what a plain pgvector
                            deployment runs: one exact SQL statement
  small user (20), warm     a user of 20 memories: the fixed cost; a
                            small user per query, all loaded, then
                            searched in turns
  small, right after load   the same search, timed right after the
                            user's first search (its load)
  first search (its load)   the large user's first search on an empty
                            cache: every vector loaded, then the search

with recall@10 of each against float64 brute force over the stored
vectors (and the largest similarity difference), build time and bulk
insert rate, bytes per vector. The two ratios PostgreSQL is held to come
last: a small user's warm search and the large user's first search,
PostgreSQL's p50 over SQLite's.

Part 2, through real gunicorn servers (1 worker x 8 threads each, rate
and concurrency limits off, the bundled local model): memory.search on a
user of 1,000 memories (search and query caches warm: no embedding) and
memory.add (each add embeds its text, the real cost), driven for a fixed
time by client threads with keep-alive sessions: one server on SQLite
(the baseline), one on PostgreSQL, and two on the same PostgreSQL with
the client threads split between them. Calls/s, p50 latency, and the CPU
each call cost the app servers, PostgreSQL and the clients. Every
database is in memory (/dev/shm; PostgreSQL runs without fsync): the
stores' own costs are compared, not a disk's.

    python -m bench.postgres [--sizes 10000,100000] [--queries 50]
                             [--seconds 30] [--clients 8]

A quick run: --sizes 2000 --queries 20 --seconds 3.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import itertools
import json
import os
import pathlib
import resource
import sys
import tempfile
import threading
import time
import typing as t
import uuid

# As memsvc runs (memsvc/__init__.py): one BLAS thread, set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
import requests  # noqa: E402

from bench.http_search import memories as memory_texts  # noqa: E402
from bench.http_search import queries as query_texts  # noqa: E402
from bench.report import recording  # noqa: E402
from bench.search import DIMS  # noqa: E402
from bench.search import SMALL_MEMORIES  # noqa: E402
from bench.search import SMALL_USERS  # noqa: E402
from bench.search import TOPICS  # noqa: E402
from bench.search import K  # noqa: E402
from bench.search import draw  # noqa: E402
from bench.search import pct  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc.models import Memory  # noqa: E402
from memsvc.search import Scope  # noqa: E402
from memsvc.search import SearchCache  # noqa: E402
from memsvc.search import SearchRequest  # noqa: E402
from memsvc.search import search  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import Store  # noqa: E402
from memsvc.store import connect  # noqa: E402
from memsvc.store.postgres import PgDatabase  # noqa: E402
from memsvc.store.postgres import PgStore  # noqa: E402
from memsvc.store.postgres.connection import register_vector  # noqa: E402
from tests.support import postgres  # noqa: E402
from tests.support.servers import MODEL_CACHE  # noqa: E402
from tests.support.servers import Server  # noqa: E402
from tests.support.servers import start_server  # noqa: E402

TENANT = "tenant"
BATCH = 1000
#: The large user's first search: loading all of its vectors into the cache, then searching.
FIRST_SEARCH = "first search (its load)"
#: A small user's warm search: every small user loaded, the users taking turns.
SMALL_WARM = "small user (20), warm"
#: The same, right after that user's first search (its load).
SMALL_AFTER_LOAD = "small, right after load"
#: How many times each store's first search of the large user is timed (taking turns).
FIRST_LOADS = 5
CACHE_BYTES = 4096 * 2**20


class CountingConnection(psycopg.Connection):
    """A connection counting its round trips: every wait for the server's answer."""

    round_trips = 0

    def wait(self, gen: t.Any, interval: float = 0.1, timeout: float | None = None) -> t.Any:
        self.round_trips += 1
        return super().wait(gen, interval, timeout)


def slow_queries(queries: int) -> int:
    """How many queries the no-cache and plain SQL paths answer (a whole scan each)."""
    return min(queries, max(10, queries // 2))


def cold_queries(queries: int) -> int:
    """How many searches follow a write."""
    return min(queries, 20)


def progress(message: str) -> None:
    """Where the run is, on stderr (not part of the recorded results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def memory_dir() -> str | None:
    """/dev/shm where it can be written (PostgreSQL's data is there too), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


# -- part 1: search in-process -----------------------------------------------------


class Workload:
    """The memories and vectors of one N, made once and inserted into each store."""

    def __init__(self, n_large: int, seed: int):
        rng = np.random.default_rng(seed)
        centroids = rng.standard_normal((TOPICS, DIMS))
        self.centroids = centroids / np.linalg.norm(centroids, axis=1, keepdims=True)
        owners = np.concatenate(
            [np.full(n_large, -1), np.repeat(np.arange(SMALL_USERS), SMALL_MEMORIES)]
        )
        rng.shuffle(owners)
        self.vectors = np.concatenate(
            [
                draw(rng, self.centroids, len(owners[s : s + BATCH]))
                for s in range(0, len(owners), BATCH)
            ]
        )
        base = 1_700_000_000_000
        self.memories = [
            Memory(
                str(uuid.uuid4()),
                TENANT,
                "large" if owner < 0 else f"small-{owner}",
                f"memory {i}",
                {},
                base + i,
                base + i,
            )
            for i, owner in enumerate(owners)
        ]
        large = owners < 0
        self.large_ids = np.array(
            [m.id for m, big in zip(self.memories, large, strict=True) if big]
        )
        self.large_matrix = self.vectors[large]
        self.n_large = n_large

    def truth(self, queries: np.ndarray) -> np.ndarray:
        """Float64 cosine of every query with every stored large-user vector: [queries, N]."""
        m = self.large_matrix.astype(np.float64)
        q = queries.astype(np.float64)
        return (q @ m.T) / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(m, axis=1))

    def build(self, store: Store) -> float:
        """Insert everything in batches of 1,000, one transaction each; seconds taken."""
        started = time.perf_counter()
        for s in range(0, len(self.memories), BATCH):
            with store.write():
                store.insert_memories(self.memories[s : s + BATCH], self.vectors[s : s + BATCH])
        return time.perf_counter() - started


def interleaved(
    paths: dict[str, t.Callable[[t.Any], t.Any]], inputs: t.Sequence[t.Any]
) -> dict[str, tuple[list[float], list]]:
    """Each input through every path in turn, timed: a busy moment of the box hits all alike."""
    out: dict[str, tuple[list[float], list]] = {name: ([], []) for name in paths}
    for x in inputs:
        for name, fn in paths.items():
            started = time.perf_counter()
            result = fn(x)
            out[name][0].append(time.perf_counter() - started)
            out[name][1].append(result)
    return out


def recall(
    found: list[list[tuple[str, float]]], sims: np.ndarray, ids: np.ndarray
) -> tuple[float, float]:
    """Share of the true top 10 found, and the largest similarity difference on them."""
    hits, worst = 0, 0.0
    for got, row in zip(found, sims, strict=True):
        top = np.argsort(-row, kind="stable")[:K]
        expected = dict(zip(ids[top], row[top], strict=True))
        hits += len(expected.keys() & {i for i, _ in got})
        worst = max([worst] + [abs(s - expected[i]) for i, s in got if i in expected])
    return hits / (K * len(found)), worst


class Searcher:
    """One store as the benchmark searches it: memsvc's paths, and its own cache."""

    def __init__(self, store: Store, open_writer: t.Callable[[], Store]):
        self.store = store
        self.open_writer = open_writer
        self.scope = Scope(clock.now_ms())
        self.cache = SearchCache(CACHE_BYTES, DIMS)
        self.first_loads: list[float] = []

    def cached(self, q: np.ndarray, user: str = "large") -> list[tuple[str, float]]:
        request = SearchRequest(TENANT, user, q, "", K, 0.0, self.scope)
        found = search(self.store, self.cache, request)
        return [(r.memory.id, r.similarity) for r in found]

    def uncached(self, q: np.ndarray) -> list[tuple[str, float]]:
        request = SearchRequest(TENANT, "large", q, "", K, 0.0, self.scope)
        found = search(self.store, None, request)
        return [(r.memory.id, r.similarity) for r in found]

    def load(self, q: np.ndarray) -> None:
        """The large user's first search, on an empty cache: loading the user, then searching."""
        self.cache = SearchCache(CACHE_BYTES, DIMS)
        started = time.perf_counter()
        self.cached(q)
        self.first_loads.append(time.perf_counter() - started)


def search_part(n_large: int, n_queries: int, directory: str) -> tuple[list[tuple], list[str]]:
    progress(f"N={n_large}: making the workload")
    work = Workload(n_large, seed=n_large)
    total = len(work.memories)
    queries = draw(np.random.default_rng(1), work.centroids, n_queries)
    sims = work.truth(queries)
    slow = slow_queries(n_queries)
    cold_n = cold_queries(n_queries)
    notes = []

    # SQLite, as memsvc opens it.
    progress(f"N={n_large}: building on SQLite")
    path = os.path.join(directory, f"bench-pg-{n_large}.sqlite3")
    sqlite = SqliteStore(connect(path, mmap_mb=1024))
    sqlite.migrate("bench:random", DIMS)
    built = work.build(sqlite)
    sqlite.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    notes.append(
        f"N={n_large} SQLite: built in {built:.1f} s ({total / built:,.0f} memories/s), "
        f"{os.path.getsize(path) / total:,.0f} bytes per vector in the file"
    )

    # PostgreSQL, each connection of its own.
    progress(f"N={n_large}: building on PostgreSQL")
    url = postgres.fresh_database(f"bench_search_{n_large}")
    db = PgDatabase(url, max_size=1)
    pg_conn = CountingConnection.connect(url, autocommit=True)
    register_vector(pg_conn)
    pg = PgStore(pg_conn)
    try:
        pg.migrate("bench:random", DIMS)
        built = work.build(pg)
        started = time.perf_counter()
        # What autovacuum would soon do after a bulk load; done now so it
        # does not run during the timings.
        pg.conn.execute("VACUUM ANALYZE")
        vacuumed = time.perf_counter() - started
        (db_size, vec_size) = pg.conn.execute(
            "SELECT pg_database_size(current_database()), pg_total_relation_size('memory_vectors')"
        ).fetchone()
        notes.append(
            f"N={n_large} PostgreSQL: built in {built:.1f} s ({total / built:,.0f} memories/s) "
            f"+ {vacuumed:.1f} s VACUUM ANALYZE, {db_size / total:,.0f} bytes per vector in the "
            f"database ({vec_size / total:,.0f} in memory_vectors)"
        )

        def naive_sql(q: np.ndarray) -> list[tuple[str, float]]:
            rows = pg.conn.execute(
                "SELECT m.id FROM memories AS m JOIN memory_vectors AS v "
                "ON v.tenant = m.tenant AND v.user_id = m.user_id AND v.vid = m.first_vid "
                "WHERE m.tenant = %s AND m.user_id = %s "
                "ORDER BY v.embedding <=> %s LIMIT 10",
                (TENANT, "large", q),
            ).fetchall()
            return [(row[0], float("nan")) for row in rows]

        # Baseline: the large user's matrix, scanned by numpy.
        matrix = np.ascontiguousarray(work.large_matrix)

        def numpy_scan(q: np.ndarray) -> np.ndarray:
            scores = matrix @ q
            top = np.argpartition(-scores, K)[:K]
            return top[np.argsort(-scores[top])]

        on_sqlite = Searcher(sqlite, lambda: SqliteStore(connect(path)))
        on_pg = Searcher(pg, lambda: PgStore(db.connect()))
        progress(f"N={n_large}: searching")
        for _ in range(FIRST_LOADS):  # taking turns; the last one's cache stays
            on_sqlite.load(queries[0])
            on_pg.load(queries[0])
        numpy_scan(queries[0])
        warm = interleaved(
            {"numpy": numpy_scan, "sqlite": on_sqlite.cached, "pg": on_pg.cached}, queries
        )
        uncached = interleaved(
            {"sqlite": on_sqlite.uncached, "pg": on_pg.uncached, "sql": naive_sql},
            queries[:slow],
        )

        # After a write through another connection: the next search must find it.
        writers = {s: s.open_writer() for s in (on_sqlite, on_pg)}
        cold: dict[Searcher, tuple[list[float], list, list[str]]] = {
            s: ([], [], []) for s in writers
        }
        for q in queries[:cold_n]:
            for s, writer in writers.items():
                new = Memory(str(uuid.uuid4()), TENANT, "large", "new", {}, 1, 1)
                with writer.write():
                    writer.insert_memories([new], q[None, :])
                started = time.perf_counter()
                got = s.cached(q)
                cold[s][0].append(time.perf_counter() - started)
                assert got[0][0] == new.id and got[0][1] > 0.999999, got[0]
                cold[s][1].append(got)
                cold[s][2].append(new.id)
        for writer in writers.values():
            t.cast(t.Any, writer).conn.close()
        # Their truth: the stored vectors and the memories added so far.
        added = queries[:cold_n].astype(np.float64)
        added /= np.linalg.norm(added, axis=1, keepdims=True)
        so_far = np.where(np.tril(np.ones((len(added), len(added)))) > 0, added @ added.T, -np.inf)
        cold_sims = np.concatenate([sims[:cold_n], so_far], axis=1)

        rng = np.random.default_rng(2)
        small_users = [f"small-{u}" for u in rng.integers(0, SMALL_USERS, n_queries)]
        # Each small user's first search loads it; the one right after is
        # timed (the box still busy with the load), then, once every user
        # is loaded, each user's search again, the users taking turns as
        # a service's do: the steady state the target is about.
        after_load: dict[Searcher, list[float]] = {s: [] for s in writers}
        small: dict[Searcher, list[float]] = {s: [] for s in writers}
        trips: list[int] = []
        for times, load in ((after_load, True), (small, False)):
            for q, user in zip(queries, small_users, strict=True):
                for s in times:
                    if load:
                        s.cached(q, user)
                    before = pg_conn.round_trips
                    started = time.perf_counter()
                    s.cached(q, user)
                    times[s].append(time.perf_counter() - started)
                    if s is on_pg:
                        trips.append(pg_conn.round_trips - before)
        notes.append(
            f"N={n_large} PostgreSQL: round trips of a small user's warm search: "
            f"{min(trips)} to {max(trips)} ({len(trips)} searches)"
        )
    finally:
        sqlite.conn.close()
        os.remove(path)
        pg.conn.close()
        postgres.drop_database(url)

    rows: list[tuple] = [(n_large, "-", "numpy scan (baseline)", warm["numpy"][0], None)]
    for label, s, key in (("SQLite", on_sqlite, "sqlite"), ("PostgreSQL", on_pg, "pg")):
        no_cache = "sqlite-vec (no cache)" if key == "sqlite" else "pgvector <=> (no cache)"
        times, found, ids = cold[s]
        cold_ids = np.concatenate([work.large_ids, np.array(ids)])
        warm_recall = recall(warm[key][1], sims, work.large_ids)
        cold_recall = recall(found, cold_sims, cold_ids)
        uncached_recall = recall(uncached[key][1], sims[:slow], work.large_ids)
        rows += [
            (n_large, label, "memsvc, cache warm", warm[key][0], warm_recall),
            (n_large, label, "memsvc, after a write", times, cold_recall),
            (n_large, label, no_cache, uncached[key][0], uncached_recall),
        ]
        if key == "pg":
            sql_recall = recall(uncached["sql"][1], sims[:slow], work.large_ids)[0]
            rows.append(
                (n_large, label, "pgvector SQL, one query", uncached["sql"][0], (sql_recall, None))
            )
        rows.append((n_large, label, SMALL_WARM, small[s], None))
        rows.append((n_large, label, SMALL_AFTER_LOAD, after_load[s], None))
        rows.append((n_large, label, FIRST_SEARCH, s.first_loads, None))
    return rows, notes


def print_search(rows: list[tuple], queries: int) -> None:
    print(
        f"Part 1: search in-process, 1536-d, one large user of N among {SMALL_USERS:,} users "
        f"of {SMALL_MEMORIES}; {queries} queries (no-cache and SQL paths: the first "
        f"{slow_queries(queries)}, after a write: {cold_queries(queries)})"
    )
    print(
        f"{'N':>7}  {'store':<11}{'path':<26}{'p50 ms':>9}{'p95 ms':>9}{'x numpy':>9}"
        f"{'recall@10':>11}{'max sim err':>12}"
    )
    base = 0.0
    for n, store, path, times, rec in rows:
        p50 = pct(times, 50)
        if store == "-":
            base = p50
        ratio = "" if path.startswith("small") or path == FIRST_SEARCH else f"{p50 / base:.2f}"
        r = "" if rec is None else f"{rec[0]:.3f}"
        e = "" if rec is None or rec[1] is None else f"{rec[1]:.1e}"
        print(
            f"{n:>7}  {store:<11}{path:<26}{p50:>9.2f}{pct(times, 95):>9.2f}{ratio:>9}"
            f"{r:>11}{e:>12}"
        )


def explain_search(rows: list[tuple]) -> None:
    p50 = {(n, store, path): pct(times, 50) for n, store, path, times, _ in rows}
    print("What the numbers mean:")
    print(
        "  x numpy: a path's p50 over the bare matrix product; memsvc adds reading the "
        "user's counters, exact float64 re-ranking and fetching 10 rows, as of one snapshot "
        "of the store: a small user's warm search reads the counters, and the rows its "
        "snapshot has not kept from earlier searches, in one statement (one round trip to "
        "PostgreSQL, asked for as soon as the scan has its candidates and read once they "
        "are ranked), a large user's in a read transaction "
        "(BEGIN, counters, rows, COMMIT: 4). First search: the large user's first search on "
        f"an empty cache, loading all its vectors, {FIRST_LOADS} times per store taking turns."
    )
    for n in dict.fromkeys(row[0] for row in rows):
        warm_pg = p50[(n, "PostgreSQL", "memsvc, cache warm")]
        warm_sqlite = p50[(n, "SQLite", "memsvc, cache warm")]
        naive = p50[(n, "PostgreSQL", "pgvector SQL, one query")]
        small_pg = p50[(n, "PostgreSQL", SMALL_WARM)]
        small_sqlite = p50[(n, "SQLite", SMALL_WARM)]
        after_pg = p50[(n, "PostgreSQL", SMALL_AFTER_LOAD)]
        after_sqlite = p50[(n, "SQLite", SMALL_AFTER_LOAD)]
        print(
            f"  N={n}: memsvc warm on PostgreSQL takes {warm_pg / warm_sqlite:.2f}x its time "
            f"on SQLite ({warm_pg - warm_sqlite:+.2f} ms); a small user's warm search "
            f"{small_pg / small_sqlite:.2f}x ({small_pg - small_sqlite:+.2f} ms, the round "
            f"trip), {after_pg / after_sqlite:.2f}x right after its load "
            f"({after_pg - after_sqlite:+.2f} ms); pgvector's own exact scan takes "
            f"{naive / warm_pg:.0f}x memsvc's warm search on PostgreSQL."
        )


def print_targets(rows: list[tuple]) -> None:
    """The two ratios PostgreSQL is held to, for every N of the run."""
    p50 = {(n, store, path): pct(times, 50) for n, store, path, times, _ in rows}
    sizes = list(dict.fromkeys(row[0] for row in rows))
    print(
        "Targets: PostgreSQL's p50 over SQLite's, measured in this run, the stores taking turns "
        "(target: at most 1.50)"
    )
    for label, path in (
        ("warm search of a small user (20 memories)", SMALL_WARM),
        ("first search of the large user (its load)", FIRST_SEARCH),
    ):
        ratios = "  ".join(
            f"N={n}: {p50[(n, 'PostgreSQL', path)] / p50[(n, 'SQLite', path)]:.2f}x" for n in sizes
        )
        print(f"  {label:<44}{ratios}")


# -- part 2: app servers -------------------------------------------------------------


def populate(store: Store, texts: list[str], vectors: np.ndarray) -> None:
    now = clock.now_ms()
    with store.write():
        store.insert_memories(
            [
                Memory(str(uuid.uuid4()), "bench", "u", text, {}, now + i, now + i)
                for i, text in enumerate(texts)
            ],
            vectors,
        )


ROUNDS = 5  # each row's time is split into rounds, the rows taking turns


class Result(t.NamedTuple):
    seconds: float
    latencies: list[float]
    errors: int
    #: CPU seconds of the app servers, of PostgreSQL, of the clients (this process).
    cpu: tuple[float, ...] = (0.0, 0.0, 0.0)

    def plus(self, other: Result) -> Result:
        return Result(
            self.seconds + other.seconds,
            self.latencies + other.latencies,
            self.errors + other.errors,
            tuple(a + b for a, b in zip(self.cpu, other.cpu, strict=True)),
        )


def tree_cpu(roots: t.Iterable[int]) -> float:
    """CPU seconds of these processes and all their descendants, exited ones included."""
    stats: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # from field 3, the state
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, stack = 0, list(roots)
    while stack:
        pid = stack.pop()
        if pid in stats:
            # utime, stime, and cutime, cstime: children that exited and were waited for.
            total += sum(int(x) for x in stats[pid][11:15])
            stack += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """CPU seconds of this process: the client threads, while servers are driven."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def drive(
    targets: list[Server],
    key: str,
    call: t.Callable[[requests.Session, str, dict[str, str], int, int], int],
    clients: int,
    seconds: float,
) -> Result:
    """``clients`` threads, thread i calling ``targets[i % len]`` for ``seconds``."""
    headers = {"x-api-key": key}
    clock_ = {"start": 0.0, "stop": 0.0}

    def start_clock() -> None:  # run once, when every client is ready
        clock_["start"] = time.perf_counter()
        clock_["stop"] = clock_["start"] + seconds

    barrier = threading.Barrier(clients, action=start_clock)

    def client(i: int) -> tuple[list[float], int]:
        url = targets[i % len(targets)].url
        latencies, errors = [], 0
        with requests.Session() as session:
            call(session, url, headers, i, -1)  # the connection open before the clock
            barrier.wait()
            n = 0
            while True:
                started = time.perf_counter()
                if started >= clock_["stop"]:
                    break
                if call(session, url, headers, i, n) != 200:
                    errors += 1
                latencies.append(time.perf_counter() - started)
                n += 1
        return latencies, errors

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, i) for i in range(clients)]
        results = [f.result() for f in futures]
        elapsed = time.perf_counter() - clock_["start"]  # to the last call's answer
    latencies = [x for lat, _ in results for x in lat]
    return Result(elapsed, latencies, sum(e for _, e in results))


def server_part(seconds: float, clients: int, n_memories: int) -> list[tuple]:
    from memsvc.embeddings.local import LocalEmbedder

    settings = {
        "WEB_CONCURRENCY": "1",
        "MEMSVC_THREADS": "8",
        "MEMSVC_RATE_LIMIT_PER_MINUTE": "0",
        "MEMSVC_CONCURRENCY_LIMIT": "0",
    }
    questions = query_texts(200)
    sentences = memory_texts(50)
    numbers = itertools.count()  # every added text is new

    def search(session, url, headers, i, n) -> int:
        q = questions[(i * 37 + max(n, 0)) % len(questions)]
        payload = json.dumps({"userId": "u", "query": q, "threshold": 0})
        return session.get(
            url + "/trpc/memory.search", params={"input": payload}, headers=headers, timeout=60
        ).status_code

    def add(session, url, headers, i, n) -> int:
        text = f"{sentences[n % len(sentences)]} (note {next(numbers)})"
        body = json.dumps({"userId": f"writer-{i}-{n % 16}", "content": text})
        return session.post(
            url + "/trpc/memory.add",
            data=body,
            headers={**headers, "Content-Type": "application/json"},
            timeout=60,
        ).status_code

    with contextlib.ExitStack() as stack:
        tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(dir=memory_dir())))
        url = postgres.fresh_database("bench_servers")
        stack.callback(postgres.drop_database, url)
        progress("starting three servers")
        servers = {}
        for name, extra in [
            ("sqlite", {}),
            ("pg-a", {"MEMSVC_DATABASE": url}),
            ("pg-b", {"MEMSVC_DATABASE": url}),
        ]:
            (tmp / name).mkdir()
            server = start_server(tmp / name, **settings, **extra)
            stack.callback(server.stop)
            servers[name] = server
        keys = {
            "sqlite": servers["sqlite"].create_key("bench", "bench"),
            "pg": servers["pg-a"].create_key("bench", "bench"),
        }
        embedder = LocalEmbedder(cache_dir=MODEL_CACHE)
        texts = memory_texts(n_memories)
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        sqlite = SqliteStore(connect(servers["sqlite"].env["MEMSVC_DATABASE"]))
        populate(sqlite, texts, vectors)
        sqlite.conn.close()
        pg = PgStore(PgDatabase(url, max_size=1).connect())
        populate(pg, texts, vectors)
        pg.conn.close()

        # Warm: every question once on every server (query cache, search
        # cache), a few adds each (the model is loaded at start-up).
        for name, server in servers.items():
            key = keys["sqlite" if name == "sqlite" else "pg"]
            with requests.Session() as session:
                for n in range(len(questions)):
                    assert search(session, server.url, {"x-api-key": key}, 0, n) == 200
                for n in range(8):
                    assert add(session, server.url, {"x-api-key": key}, 99, n) == 200

        app_pids = [server.proc.pid for server in servers.values()]
        pg_pid = postgres.server().get_pid()

        def cpu() -> tuple[float, ...]:
            return tree_cpu(app_pids), tree_cpu([pg_pid] if pg_pid else []), own_cpu()

        cases = [
            ("sqlite", "SQLite", [servers["sqlite"]]),
            ("pg", "PostgreSQL", [servers["pg-a"]]),
            ("pg", "PostgreSQL", [servers["pg-a"], servers["pg-b"]]),
        ]
        rows = []
        for call_name, call in [("memory.search", search), ("memory.add", add)]:
            totals = [Result(0.0, [], 0) for _ in cases]
            for r in range(ROUNDS):
                for i, (key_name, store, targets) in enumerate(cases):
                    progress(f"{call_name}, {store}, {len(targets)} server(s), round {r + 1}")
                    before = cpu()
                    result = drive(targets, keys[key_name], call, clients, seconds / ROUNDS)
                    used = tuple(b - a for a, b in zip(before, cpu(), strict=True))
                    totals[i] = totals[i].plus(result._replace(cpu=used))
            rows += [
                (call_name, store, len(targets), total)
                for (_, store, targets), total in zip(cases, totals, strict=True)
            ]
    return rows


def print_servers(rows: list[tuple], seconds: float, clients: int, n_memories: int) -> None:
    print(
        f"Part 2: through gunicorn, 1 worker x 8 threads per server, limits off, bundled model; "
        f"{clients} client threads (keep-alive) split evenly over the servers, {seconds:g} s "
        f"per row in {ROUNDS} rounds, the rows taking turns; search: a user of "
        f"{n_memories:,} memories, 200 questions, caches warm; add: a new text each call, "
        "16 users per client thread"
    )
    print(
        f"{'call':<15}{'store':<12}{'servers':>8}{'calls/s':>9}{'x SQLite':>10}"
        f"{'p50 ms':>9}{'errors':>8}   {'CPU ms per call: app':>20}{'db':>6}{'client':>8}"
        f"{'cores busy':>12}"
    )
    base = 0.0
    for call, store, servers, r in rows:
        calls = len(r.latencies)
        rate = calls / r.seconds
        if store == "SQLite":
            base = rate
        app, db, client = (1000 * c / calls for c in r.cpu)
        print(
            f"{call:<15}{store:<12}{servers:>8}{rate:>9.0f}{rate / base:>10.2f}"
            f"{pct(r.latencies, 50):>9.1f}{r.errors:>8}   {app:>20.2f}{db:>6.2f}{client:>8.2f}"
            f"{sum(r.cpu) / r.seconds:>12.2f}"
        )


def explain_servers(rows: list[tuple]) -> None:
    by = {(call, store, servers): r for call, store, servers, r in rows}

    def rate(r: Result) -> float:
        return len(r.latencies) / r.seconds

    def per_call(r: Result, i: int) -> float:
        return 1000 * r.cpu[i] / len(r.latencies)

    print("What the numbers mean:")
    print(
        "  CPU ms per call: CPU time of the app servers (workers and masters), of PostgreSQL "
        "(every backend) and of the client threads (this process), over the calls made; "
        "cores busy: all three per second. Other load on the box is in none of them, but "
        "slows every row."
    )
    for call in dict.fromkeys(row[0] for row in rows):
        sqlite, one, two = (
            by[(call, "SQLite", 1)],
            by[(call, "PostgreSQL", 1)],
            by[(call, "PostgreSQL", 2)],
        )
        print(
            f"  {call}: one server on PostgreSQL does {rate(one) / rate(sqlite):.2f}x the calls/s "
            f"of one on SQLite, two servers {rate(two) / rate(sqlite):.2f}x "
            f"({rate(two) / rate(one):.2f}x one); per call the app spends "
            f"{per_call(one, 0) - per_call(sqlite, 0):+.2f} ms CPU on PostgreSQL and PostgreSQL "
            f"{per_call(one, 1):.2f} ms."
        )
    print(
        "  A second server can only add throughput while CPU is left over: on 2 cores shared "
        "by the clients, the app servers and PostgreSQL, the shape is what counts."
    )


# -- the run ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--dir", default=memory_dir())
    args = parser.parse_args()
    started = time.perf_counter()

    rows, notes = [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            r, n = search_part(size, args.queries, tmp)
            rows += r
            notes += n
    print_search(rows, args.queries)
    for note in notes:
        print(note)
    explain_search(rows)
    print_targets(rows)
    print()

    server_rows = server_part(args.seconds, args.clients, args.memories)
    print_servers(server_rows, args.seconds, args.clients, args.memories)
    explain_servers(server_rows)
    print()
    print(f"(the whole run took {(time.perf_counter() - started) / 60:.1f} min)")


if __name__ == "__main__":
    with recording("postgres"):
        main()
