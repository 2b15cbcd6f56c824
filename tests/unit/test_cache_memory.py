"""Memory held is memory counted: what the search cache says it holds is what the process holds.

Users whose memories carry large metadata are searched with filters in a
fresh process; its private memory's growth (RssAnon) after a maintenance
round (:meth:`SearchCache.prune`, which a worker runs every few seconds) is
compared with the growth of :attr:`SearchCache.nbytes`
(``memsvc_search_cache_bytes``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import numpy as np

from memsvc.models import Memory
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
