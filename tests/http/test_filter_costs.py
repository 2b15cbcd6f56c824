"""What one filter may cost: bounded work per call, bounded memory per worker, and no
read, however long, that makes another tenant's writes wait."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
import typing as t
import uuid

import numpy as np
import pytest

from memsvc import clock
from memsvc.api.context import runtime
from memsvc.models import Memory
from memsvc.search import Scope
from memsvc.search import SearchCache
from memsvc.search import SearchRequest
from memsvc.search import filters
from memsvc.search import matching
from memsvc.search import search as run_search
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import maintenance_round
from tests.support.helpers import mutate
from tests.support.helpers import on_disk
from tests.support.helpers import query
from tests.support.stores import close_store
from tests.support.stores import open_store

#: The most expensive filter the API takes: every condition on a key of its own.
WORST = {f"key{i}": {"exists": False} for i in range(filters.MAX_CONDITIONS - 1)}
WORST["kind"] = {"eq": "no memory has this"}


def fill(app, tenant: str, user: str, n: int) -> None:
    with app.app_context():
        rt = runtime()
        store = rt.store()
        rng = np.random.default_rng(1)
        vectors = rng.standard_normal((n, rt.embedder.dimensions)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        memories = [
            Memory(
                str(uuid.uuid4()),
                tenant,
                user,
                f"fact number {i}",
                {"kind": f"k{i % 7}", "n": i, "tags": ["a", str(i % 3)]},
                i + 1,
                i + 1,
            )  # fmt: skip
            for i in range(n)
        ]
        with store.write():
            store.insert_memories(memories, vectors)


def test_the_documented_limits_of_a_filter(client, auth):
    ok = {f"k{i}": 1 for i in range(filters.MAX_CONDITIONS)}
    assert data(query(client, "memory.getAll", {"userId": "u", "filter": ok}, headers=auth)) == []
    for flt, says in (
        ({**ok, "one more": 1}, f"at most {filters.MAX_CONDITIONS} conditions"),
        ({"k": {"in": ["x" * 100] * 200}}, f"at most {filters.MAX_FILTER_BYTES} bytes"),
        ({"k": {"eq": json.loads("[" * 40 + "]" * 40)}}, "nested more than 32 levels"),
        ({".".join("a" * 40): 1}, "at most 32 parts"),
    ):
        error = assert_error(
            query(client, "memory.getAll", {"userId": "u", "filter": flt}, headers=auth),
            400,
            "BAD_REQUEST",
            "memory.getAll",
        )
        assert says in error["message"]


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "store"])
def test_repeated_large_filters_keep_a_workers_memory_bounded(store, hash_embedder, cached):
    """Every search naming new keys builds new columns: they are counted and evicted."""
    n = 2000
    memories = [
        Memory(str(uuid.uuid4()), "t", "u", f"m{i}", {"kind": f"k{i % 5}"}, i + 1, i + 1)
        for i in range(n)
    ]
    with store.write():
        store.insert_memories(memories, hash_embedder.embed([m.content for m in memories]))
    cache = SearchCache(4 * 2**20, hash_embedder.dimensions) if cached else None
    query_vector = hash_embedder.embed(["q"])[0]

    def search(round_: int) -> None:
        flt = {f"r{round_}k{i}": {"exists": False} for i in range(filters.MAX_CONDITIONS)}
        scope = Scope(clock.now_ms(), filters.parse(flt))
        found = run_search(store, cache, SearchRequest("t", "u", query_vector, "", 10, -1.0, scope))
        assert len(found) == 10

    for r in range(5):
        search(r)
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        for r in range(5, 65):
            search(r)
            if cache is not None:
                assert cache.nbytes <= cache.max_bytes
        grown = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    # 60 rounds x 32 new keys x 2,000 memories would keep ~50 MB of columns.
    assert grown < 1.5 * 2**20 if cache is None else grown < cache.column_budget + 2**20
    if cache is not None:
        snapshot = cache._entries[("t", "u")]
        assert 0 < snapshot.columns.nbytes <= cache.column_budget
        assert cache.nbytes == sum(cache._sizes.values())


def test_a_long_read_never_makes_another_tenants_writes_wait(
    app, client, auth, new_key, database, store_kind
):
    """A checkpoint that would wait for a long read (with every writer queued behind it)
    gives up and is done by a later maintenance round instead."""
    other = {"x-api-key": new_key("tenant-B")}
    fill(app, "tenant-A", "big", 4000)
    marker = "zqxlongreadmarker"
    m = data(mutate(client, "memory.add", {"userId": "u", "content": marker}, headers=auth))
    maintenance_round(app)

    # A read that started before the erasure and is still going.
    reader = open_store(database)
    reading = reader.read()
    reading.__enter__()
    reader.count_memories(None, None, clock.now_ms())
    stop = threading.Event()

    def worst_filters() -> None:  # and the most expensive listing the API allows, on a loop
        c = app.test_client()
        while not stop.is_set():
            body = {"userId": "big", "filter": WORST, "limit": 1000}
            assert data(query(c, "memory.getAll", body, headers=auth)) == []

    listing = threading.Thread(target=worst_filters)
    listing.start()
    try:
        data(mutate(client, "memory.delete", {"id": m["id"]}, headers=auth))
        maintenance = threading.Thread(target=maintenance_round, args=(app,))
        maintenance.start()
        time.sleep(0.3)  # the round is under way
        started = time.monotonic()
        data(mutate(client, "memory.add", {"userId": "w", "content": "hello"}, headers=other))
        waited = time.monotonic() - started
        maintenance.join()
    finally:
        stop.set()
        listing.join()
        reading.__exit__(None, None, None)
        close_store(reader)
    assert waited < 0.5, f"another tenant's add waited {waited:.2f} s"
    if store_kind == "sqlite":
        # The read is over: the next round empties the WAL, and the erased text is gone.
        maintenance_round(app)
        assert marker.encode() not in on_disk(database)


def deep_metadata(seed: int, size: int = 60_000, depth: int = 30) -> dict:
    """About ``size`` bytes of metadata nested ``depth`` levels deep under ``a``: each level
    holds small leaves beside the next (``n``), within the documented limits."""
    per = max(1, size // depth // 23)
    node: dict = {"leaf": seed}
    for level in range(depth - 1):
        node = {**{f"k{i}": [i, {"x": f"{seed}-{level}"}] for i in range(per)}, "n": node}
    return {"a": node}


#: 30 ``ne`` conditions on ever deeper values of deep_metadata and one ``exists`` (1.3 KB):
#: each value compared is most of a memory's metadata.
DEEP_FILTER = {"a" + ".n" * i: {"ne": f"not this {i}"} for i in range(30)}
DEEP_FILTER["a" + ".n" * 29 + ".leaf"] = {"exists": True}


def add_deep(client: t.Any, auth: dict[str, str], user: str, count: int) -> None:
    for i in range(count):
        metadata = deep_metadata(i)
        assert 55_000 < len(json.dumps(metadata, separators=(",", ":"))) <= 65_536
        body = {"userId": user, "content": f"deep {i}", "metadata": metadata}
        data(mutate(client, "memory.add", body, headers=auth))


class Steps:
    """The nodes a filter's comparisons visit (each calls :func:`matching.kind` once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        original = matching.kind

        def counting(value: t.Any) -> int:
            self.count += 1
            return original(value)

        monkeypatch.setattr(matching, "kind", counting)

    def taken(self, call: t.Callable[[], t.Any]) -> tuple[t.Any, int]:
        before = self.count
        out = call()
        return out, self.count - before


def test_a_filter_costs_its_conditions_per_memory_not_the_metadata(configured, monkeypatch):
    """25 memories of 60 KB metadata nested 30 deep, a filter of 30 ``ne`` on deep values:
    the filtered listing and the first filtered search read each memory's metadata once
    (a bound of exactly that much admits them) and compare per memory about what the
    filter's conditions are, not the values they meet (a whole value was once serialized
    per condition: 4.5 s of CPU per call). What that costs in time: bench/filter_costs.py."""
    assert len(json.dumps(DEEP_FILTER, separators=(",", ":"))) > 1200
    sizes = [len(json.dumps(deep_metadata(i), separators=(",", ":"))) for i in range(25)]
    client, auth = configured(MAX_FILTER_SCAN_BYTES=sum(sizes))
    add_deep(client, auth, "deep", 25)
    steps = Steps(monkeypatch)
    # Per memory, a condition walks its path (at most 31 keys) and compares one node.
    per_call = 25 * sum(len(key.split(".")) + 2 for key in DEEP_FILTER)

    body = {"userId": "deep", "limit": 25}
    listed = data(query(client, "memory.getAll", body, headers=auth))
    assert len(listed) == 25
    flt = {**body, "filter": DEEP_FILTER}
    found, taken = steps.taken(lambda: data(query(client, "memory.getAll", flt, headers=auth)))
    assert [m["id"] for m in found] == [m["id"] for m in listed]
    assert 0 < taken <= per_call, (taken, per_call)

    search = {"userId": "deep", "query": "deep", "limit": 25, "threshold": 0}
    everything = data(query(client, "memory.search", search, headers=auth))
    deep = {**search, "filter": DEEP_FILTER}
    matched, taken = steps.taken(lambda: data(query(client, "memory.search", deep, headers=auth)))
    assert [m["id"] for m in matched] == [m["id"] for m in everything]
    assert 0 < taken <= per_call, (taken, per_call)

    # The bound counts every byte read: one byte less, and the same listing is refused.
    client, auth = configured(MAX_FILTER_SCAN_BYTES=sum(sizes) - 1)
    add_deep(client, auth, "deep", 25)
    refused = query(client, "memory.getAll", flt, headers=auth)
    assert (
        "MEMSVC_MAX_FILTER_SCAN_BYTES"
        in assert_error(refused, 400, "BAD_REQUEST", "memory.getAll")["message"]
    )


@pytest.mark.parametrize("cache_mb", [64, 0], ids=["cached", "store"])
def test_a_filter_examines_no_more_metadata_than_one_call_may(configured, cache_mb):
    """Past ``MEMSVC_MAX_FILTER_SCAN_BYTES`` of metadata examined, a filtered call is refused
    with 400, on every path: a listing, a search of a cached user, a search through the store."""
    client, auth = configured(MAX_FILTER_SCAN_BYTES=1_000_000, SEARCH_CACHE_MB=cache_mb)
    add_deep(client, auth, "large", 20)  # 1.2 MB of metadata
    add_deep(client, auth, "small", 5)
    flt = {"a.n.leaf": {"exists": False}}
    calls = [
        ("memory.getAll", {"filter": flt}),
        ("memory.search", {"query": "deep", "threshold": 0, "filter": flt}),
        ("memory.search", {"query": "deep", "threshold": 0, "filter": flt, "mode": "keyword"}),
    ]
    for path, body in calls:
        assert data(query(client, path, {"userId": "small", **body}, headers=auth)) != []
        refused = query(client, path, {"userId": "large", **body}, headers=auth)
        error = assert_error(refused, 400, "BAD_REQUEST", path)
        assert "MEMSVC_MAX_FILTER_SCAN_BYTES" in error["message"], error
        unfiltered = {k: v for k, v in body.items() if k != "filter"}
        assert data(query(client, path, {"userId": "large", **unfiltered}, headers=auth)) != []
