"""One commit's side of :mod:`bench.before_after`: run with that tree first on ``sys.path``.

Not imported by the coordinator: it reads this file and runs it as
``python -c`` in the other tree's folder, so that ``memsvc`` and
``bench.search`` are that tree's. It speaks lines of JSON on stdin/stdout.
It works with both forms of the search API: ``search(store, cache,
SearchRequest(...))`` and the earlier ``search(store, cache, tenant, user,
query, text, k, threshold, scope)``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import memsvc  # noqa: E402
import memsvc.search as search_module  # noqa: E402
from bench import search as bench_search  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc.models import Memory  # noqa: E402
from memsvc.search import Scope  # noqa: E402
from memsvc.search import SearchCache  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import connect  # noqa: E402

K = 10


def searcher(store, cache):
    if hasattr(search_module, "SearchRequest"):
        request = search_module.SearchRequest

        def run(user, q):
            scope = Scope(clock.now_ms())
            return search_module.search(store, cache, request("tenant", user, q, "", K, 0.0, scope))
    else:

        def run(user, q):
            scope = Scope(clock.now_ms())
            return search_module.search(store, cache, "tenant", user, q, "", K, 0.0, scope)

    return run


class Timings(dict):
    """Named lists of milliseconds: wall-clock, and the thread's CPU time (``name cpu``)."""

    def timed(self, name, fn, *args) -> None:
        cpu, started = time.thread_time_ns(), time.perf_counter_ns()
        fn(*args)
        wall, cpu = time.perf_counter_ns() - started, time.thread_time_ns() - cpu
        self.setdefault(name, []).append(wall / 1e6)
        self.setdefault(name + " cpu", []).append(cpu / 1e6)


def main() -> None:
    n_large, directory = int(sys.argv[1]), sys.argv[2]
    path = os.path.join(directory, f"tree-{os.getpid()}.sqlite3")
    store, centroids, _ = bench_search.build(path, n_large, seed=n_large)
    dims = centroids.shape[1]
    rng = np.random.default_rng(1)
    queries = bench_search.draw(rng, centroids, 200)
    cache = SearchCache(4096 * 2**20, dims)
    run = searcher(store, cache)
    writer = SqliteStore(connect(path))
    run("large", queries[0])  # the large user loaded, as bench.search does first
    print(json.dumps({"ready": memsvc.__file__}), flush=True)
    users = [f"small-{u}" for u in range(bench_search.SMALL_USERS)]
    turn = 0
    for line in sys.stdin:
        command = json.loads(line)
        what, count = command["what"], command["count"]
        out = Timings()
        if what == "small":
            # A small user's first search (it loads them), the next two, then
            # the same user searched on: bench.search's "first search" and
            # "warm", and what a warm search costs once nothing has just changed.
            for _ in range(count):
                user = users[turn % len(users)]
                q = queries[turn % len(queries)]
                turn += 1
                cache.forget("tenant", user)
                out.timed("small first", run, user, q)
                out.timed("small warm", run, user, q)
                out.timed("small 2nd warm", run, user, q)
                for _ in range(2):
                    run(user, queries[(turn + 7) % len(queries)])
                out.timed("small steady", run, user, queries[(turn + 7) % len(queries)])
        elif what == "large":
            for _ in range(count):
                q = queries[turn % len(queries)]
                turn += 1
                out.timed("large warm", run, "large", q)
        elif what == "write":
            for _ in range(count):
                q = queries[turn % len(queries)]
                turn += 1
                with writer.write():
                    writer.insert_memories(
                        [Memory(str(uuid.uuid4()), "tenant", "large", "new", {}, 1, 1)],
                        q[None, :],
                    )
                out.timed("large after a write", run, "large", q)
                small = users[turn % len(users)]
                run(small, q)  # loaded (or current)
                with writer.write():
                    writer.insert_memories(
                        [Memory(str(uuid.uuid4()), "tenant", small, "new", {}, 1, 1)], q[None, :]
                    )
                out.timed("small after a write", run, small, q)
        print(json.dumps(out), flush=True)
    writer.conn.close()
    store.conn.close()
    os.remove(path)


main()
