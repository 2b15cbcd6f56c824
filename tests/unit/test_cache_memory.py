"""Memory held is memory counted: what the search cache says it holds is what the process holds.

Users whose memories carry large metadata are searched with filters in a
fresh process; its private memory's growth (RssAnon) after a maintenance
round (:meth:`SearchCache.prune`, which a worker runs every few seconds) is
compared with the growth of :attr:`SearchCache.nbytes`
(``memsvc_search_cache_bytes``).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
import uuid

import numpy as np

from memsvc import clock
from memsvc.models import Memory
from memsvc.search import Scope
from memsvc.search import SearchCache
from memsvc.search import SearchRequest
from memsvc.search import search
from tests.support.servers import REPO
from tests.support.stores import close_store
from tests.support.stores import open_store

DIMS = 16
USERS, MEMORIES = 6, 120


def metadata(rng: np.random.Generator) -> dict:
    """About 60 KB of JSON: nested objects, arrays, strings and numbers, a distinct tag."""
    node: dict = {"tag": uuid.uuid4().hex * 6, "n": int(rng.integers(1000))}
    for level in range(30):
        node = {
            **{f"k{i}": [i, {"x": f"{level}-{i}-{rng.integers(1000)}"}] for i in range(70)},
            "n": node,
        }
    return {"x": node, "tag": uuid.uuid4().hex * 6}


SCRIPT = """
import gc, json, sys
import numpy as np
from memsvc import clock
from memsvc.search import Scope, SearchCache, SearchRequest, filters, search
from tests.support.stores import open_store

store = open_store(sys.argv[1])
cache = SearchCache(1 << 30, {dims})
query = np.ones({dims}, dtype=np.float32)
FILTERS = [filters.parse(f) for f in ({{"x": {{"exists": True}}}}, {{"tag": {{"ne": "none"}}}})]


def anonymous():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) * 1024


def search_user(user):
    for flt in FILTERS:
        for mode in ("semantic", "hybrid", "semantic"):
            scope = Scope(clock.now_ms(), flt)
            search(store, cache, SearchRequest("t", user, query, "tag", 10, 0.0, scope, mode))


search_user("warm")  # every code path run once: what the others add is theirs
gc.collect()
cache.prune(store)
rss, counted = anonymous(), cache.nbytes
for u in range({users}):
    search_user(f"u{{u}}")
gc.collect()
cache.prune(store)  # as the worker's maintenance does every few seconds
print(json.dumps({{"rss": anonymous() - rss, "counted": cache.nbytes - counted,
                  "users": cache.users()}}))
"""


def test_the_cache_counts_what_it_holds_for_users_with_large_metadata(database):
    store = open_store(database)
    try:
        store.migrate("test:random", DIMS)
        rng = np.random.default_rng(1)
        for user, count in [("warm", 20)] + [(f"u{u}", MEMORIES) for u in range(USERS)]:
            memories = [
                Memory(str(uuid.uuid4()), "t", user, f"tag memory {i}", metadata(rng), i + 1, i + 1)
                for i in range(count)
            ]
            assert len(json.dumps(memories[0].metadata, separators=(",", ":"))) > 55_000
            with store.write():
                store.insert_memories(memories, rng.standard_normal((count, DIMS)).astype("f4"))
    finally:
        close_store(store)
    script = textwrap.dedent(SCRIPT.format(dims=DIMS, users=USERS))
    out = subprocess.run(
        [sys.executable, "-c", script, database],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    measured = json.loads(out.stdout)
    assert measured["users"] == USERS + 1
    held, counted = measured["rss"], measured["counted"]
    # Six users of 120 memories with 60 KB of metadata each: ~43 MB of text at least.
    assert held > 40 * 2**20, measured
    assert abs(held - counted) <= 0.1 * held, measured


def test_a_warm_search_takes_its_working_arrays_from_the_heap(database):
    """A cached user's warm search reuses the memory the previous one freed: no page faulted in.

    20 memories at 1536 dimensions, each as similar to the query as the
    others (0), so all 20 are ranked exactly: 240 KB float64 arrays. Were
    each a memory map of its own, every search would map them again and
    fault in their pages (60 each).
    """
    dims, count = 1536, 20
    store = open_store(database)
    try:
        store.migrate("test:random", dims)
        rng = np.random.default_rng(1)
        vectors = np.zeros((count, dims), dtype=np.float32)
        vectors[:, : dims // 2] = rng.standard_normal((count, dims // 2))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        memories = [
            Memory(str(uuid.uuid4()), "t", "u", f"m{i}", {}, i + 1, i + 1) for i in range(count)
        ]
        with store.write():
            store.insert_memories(memories, vectors)
        cache = SearchCache(1 << 30, dims)
        query = np.zeros(dims, dtype=np.float32)
        query[dims // 2 :] = rng.standard_normal(dims // 2)
        query /= np.linalg.norm(query)

        def warm_search() -> None:
            request = SearchRequest("t", "u", query, "", 10, 0.0, Scope(clock.now_ms()))
            found = search(store, cache, request)
            assert len(found) == 10 and all(r.similarity == 0.0 for r in found)

        for _ in range(5):  # loaded, then searched warm: its arrays freed to the heap
            warm_search()
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for _ in range(20):
            warm_search()
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
    finally:
        close_store(store)
    assert faults < 100, f"{faults} page faults in 20 warm searches"
