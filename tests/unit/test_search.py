"""memsvc.search: the cached path returns exactly what the uncached path and brute force do."""

import dataclasses
import functools
import json
import re
import subprocess
import sys
import textwrap
import threading
import uuid

import numpy as np
import pytest

from memsvc import clock
from memsvc.models import Memory
from memsvc.search import Scope
from memsvc.search import SearchCache
from memsvc.search import SearchRequest
from memsvc.search import cache as cache_module
from memsvc.search import filters
from memsvc.search import records as records_module
from memsvc.search import search as run_search
from memsvc.search.exact import exact_similarity
from tests.support.stores import close_store
from tests.support.stores import open_store
from tests.support.stores import raw_vector
from tests.support.stores import sql

DIMS = 32


@pytest.fixture(autouse=True, params=["per-worker", "shared"])
def cache_kind(request, tmp_path, monkeypatch):
    """Every test twice: vectors in the process, and in a snapshot file (every user shared)."""
    if request.param == "shared":
        shared = functools.partial(
            cache_module.SearchCache, shared_dir=str(tmp_path / "snapshots"), share_min_bytes=0
        )
        monkeypatch.setitem(globals(), "SearchCache", shared)
    return request.param


def clustered(rng, n, centroids):
    c = centroids[rng.integers(0, len(centroids), n)]
    v = c + rng.standard_normal((n, DIMS)) / np.sqrt(DIMS)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def db(database):
    """(database, store) on SQLite and on PostgreSQL."""
    store = open_store(database)
    store.migrate("test:random", DIMS)
    yield database, store
    close_store(store)


def add(store, vectors, user="u", tenant="t", created=None):
    memories = [
        Memory(
            str(uuid.uuid4()), tenant, user, f"m{i}", {}, created or 1000 + i, created or 1000 + i
        )
        for i in range(len(vectors))
    ]
    with store.write():
        store.insert_memories(memories, vectors)
    return memories


def brute_force(store, user, query, k, threshold, tenant="t", scope=None):
    """float64 over every stored vector, read one by one without the store's vector code.

    A memory scores as its best window; the scope is applied memory by memory.
    """
    rows = store.conn.execute(
        sql(
            store,
            "SELECT m.seq, m.created_at, m.id, m.first_vid, m.windows, m.metadata, m.expires_at "
            "FROM memories m WHERE tenant = ? AND user_id = ?",
        ),
        (tenant, user),
    ).fetchall()
    scored = []
    for seq, created, memory_id, first_vid, windows, metadata, expires_at in rows:
        if scope is not None:
            if expires_at is not None and expires_at <= scope.now:
                continue
            if scope.filter and not scope.filter.matches(json.loads(metadata)):
                continue
        vectors = np.array(
            [raw_vector(store, tenant, user, vid) for vid in range(first_vid, first_vid + windows)]
        )
        best = float(exact_similarity(vectors, query).max())
        scored.append((-best, -created, -seq, memory_id, best))
    scored.sort()
    return [(memory_id, best) for *_, memory_id, best in scored if best >= threshold][:k]


def ids(results):
    return [m.id for m, _ in results]


def search(store, cache, user, query, k, threshold, tenant="t", scope=None):
    scope = scope or Scope(clock.now_ms())
    found = run_search(store, cache, SearchRequest(tenant, user, query, "", k, threshold, scope))
    return [(r.memory, r.similarity) for r in found]


def check_all_paths(store, cache, user, query, k, threshold, scope=None):
    expected = brute_force(store, user, query, k, threshold, scope=scope)
    uncached = search(store, None, user, query, k, threshold, scope=scope)
    cached = search(store, cache, user, query, k, threshold, scope=scope)
    assert ids(uncached) == [i for i, _ in expected]
    assert ids(cached) == [i for i, _ in expected]
    for (_, a), (_, b), (_, c) in zip(uncached, cached, expected, strict=True):
        assert a == pytest.approx(c, abs=1e-12) and b == pytest.approx(c, abs=1e-12)


@pytest.mark.parametrize("k, threshold", [(1, 0), (10, 0), (10, 0.5), (100, 0.2), (10, 0.99)])
def test_cached_uncached_and_brute_force_agree(db, k, threshold):
    _, store = db
    rng = np.random.default_rng(k)
    centroids = rng.standard_normal((5, DIMS))
    add(store, clustered(rng, 500, centroids))
    cache = SearchCache(64 * 2**20, DIMS)
    for _ in range(10):
        query = clustered(rng, 1, centroids)[0]
        check_all_paths(store, cache, "u", query, k, threshold)


def test_exact_ties_go_to_the_newest_on_every_path(db):
    _, store = db
    same = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    add(store, np.stack([same] * 30), created=5000)
    add(store, np.random.default_rng(0).standard_normal((30, DIMS)).astype(np.float32))
    check_all_paths(store, SearchCache(2**20, DIMS), "u", same, 7, 0.5)


def test_adds_and_deletes_are_seen_by_the_next_search(db):
    _, store = db
    rng = np.random.default_rng(3)
    centroids = rng.standard_normal((3, DIMS))
    memories = add(store, clustered(rng, 100, centroids))
    cache = SearchCache(64 * 2**20, DIMS)
    query = clustered(rng, 1, centroids)[0]
    check_all_paths(store, cache, "u", query, 10, 0)
    for step in range(20):
        if step % 3 == 0:
            with store.write():
                store.delete_memory("t", memories.pop(rng.integers(len(memories))).id)
        else:
            memories += add(store, clustered(rng, 1 + step, centroids))
        check_all_paths(store, cache, "u", query, 10, 0)
    # The very vector just added is found first.
    [newest] = add(store, query[None, :])
    with store.read():
        assert ids(search(store, cache, "u", query, 1, 0)) == [newest.id]


def test_many_deletes_are_compacted_away(db):
    _, store = db
    rng = np.random.default_rng(4)
    memories = add(store, rng.standard_normal((40, DIMS)).astype(np.float32))
    cache = SearchCache(64 * 2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    check_all_paths(store, cache, "u", query, 5, 0)
    with store.write():
        for m in memories[:30]:
            store.delete_memory("t", m.id)
    check_all_paths(store, cache, "u", query, 5, 0)
    snap = cache._entries[("t", "u")]
    assert snap.n == snap.m == 10 and snap.alive[: snap.m].all()


def test_other_users_and_tenants_never_leak_into_a_search(db):
    _, store = db
    rng = np.random.default_rng(5)
    target = rng.standard_normal(DIMS).astype(np.float32)
    add(store, target[None, :], user="victim")
    add(store, target[None, :], user="u", tenant="other-tenant")
    mine = add(store, rng.standard_normal((3, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    with store.read():
        found = search(store, cache, "u", target, 10, 0)
    assert set(ids(found)) == {m.id for m in mine}


def test_memory_stays_within_the_bound_and_big_users_use_the_store(db):
    _, store = db
    rng = np.random.default_rng(6)
    for u in range(10):
        add(store, rng.standard_normal((50, DIMS)).astype(np.float32), user=f"u{u}")
    add(store, rng.standard_normal((400, DIMS)).astype(np.float32), user="big")
    cache = SearchCache(150 * (DIMS * 4 + 21) * 2, DIMS)  # room for ~300 rows incl. growth
    for u in [f"u{u}" for u in range(10)] + ["big"]:
        query = rng.standard_normal(DIMS).astype(np.float32)
        check_all_paths(store, cache, u, query, 10, 0)
        assert cache.nbytes <= cache.max_bytes
    assert ("t", "big") not in cache._entries


def test_replacing_every_vector_reloads_the_user(db):
    from memsvc.services import memories
    from memsvc.services import reembedding
    from tests.support.helpers import HashEmbedder

    _, store = db
    embedder = HashEmbedder(DIMS, "test:random")
    memories.add(store, embedder, "t", "u", "alpha", {})
    cache = SearchCache(2**20, DIMS)
    with store.read():
        assert len(search(store, cache, "u", embedder.vector("alpha"), 5, 0.99)) == 1
    other = HashEmbedder(DIMS * 2, "test:other")
    reembedding.reembed(store, other)
    cache.row_bytes = DIMS * 2 * 4 + 21
    with store.read():
        [(m, sim)] = search(store, cache, "u", other.embed(["alpha"])[0], 5, 0.99)
    assert m.content == "alpha" and sim == pytest.approx(1)


def test_writes_from_another_process_are_seen_at_once(db):
    path, store = db
    rng = np.random.default_rng(7)
    first = add(store, rng.standard_normal((20, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    check_all_paths(store, cache, "u", query, 50, 0)
    script = textwrap.dedent(
        f"""
        import uuid, numpy as np
        from memsvc.models import Memory
        from tests.support.stores import open_store
        store = open_store({path!r})
        q = np.array({query.tolist()!r}, dtype=np.float32)
        with store.write():
            store.insert_memories(
                [Memory("other-process", "t", "u", "x", {{}}, 1, 1)], q[None, :])
            store.delete_memory("t", {first[0].id!r})
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    with store.read():
        found = ids(search(store, cache, "u", query, 50, 0))
    assert found[0] == "other-process"
    assert first[0].id not in found
    check_all_paths(store, cache, "u", query, 50, 0)


def test_searches_while_another_thread_writes_stay_exact(db):
    path, store = db
    rng = np.random.default_rng(8)
    add(store, rng.standard_normal((100, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    errors = []
    stop = threading.Event()

    def writer():
        s = open_store(path)
        r = np.random.default_rng(9)
        try:
            for _ in range(100):
                add(s, r.standard_normal((2, DIMS)).astype(np.float32))
        finally:
            close_store(s)
            stop.set()

    def reader():
        s = open_store(path)
        r = np.random.default_rng(10)
        try:
            while not stop.is_set():
                q = r.standard_normal(DIMS).astype(np.float32)
                with s.read():
                    got = search(s, cache, "u", q, 5, 0)
                    want = search(s, None, "u", q, 5, 0)
                if ids(got) != ids(want):
                    errors.append((ids(got), ids(want)))
        except Exception as e:  # reported below
            errors.append(e)
        finally:
            close_store(s)

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert errors == []


def add_windowed(store, rng, centroids, n, user="u"):
    """Memories of 1 to 6 windows each, with metadata a filter can test."""
    memories, vectors = [], []
    for i in range(n):
        windows = int(rng.integers(1, 7))
        memories.append(
            Memory(
                str(uuid.uuid4()), "t", user, f"m{i}",
                {"n": int(i % 7), "kind": ["a", "b", "c"][i % 3], "tags": [f"t{i % 4}"]},
                1000 + i, 1000 + i,
            )
        )  # fmt: skip
        vectors.append(clustered(rng, windows, centroids))
    with store.write():
        store.insert_memories(memories, vectors)
    return memories


FILTERS = [
    None,
    {"kind": "b"},
    {"n": {"gte": 5}},
    {"kind": {"in": ["a", "c"]}, "n": {"ne": 3}},
    {"tags": {"contains": "t1"}},
    {"n": 6, "kind": "a"},  # rare: the uncached path widens to the whole user
]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: json.dumps(f))
@pytest.mark.parametrize("k, threshold", [(1, 0), (10, 0), (10, 0.3)])
def test_long_memories_and_filters_agree_on_every_path(db, flt, k, threshold):
    _, store = db
    rng = np.random.default_rng(k + len(json.dumps(flt)))
    centroids = rng.standard_normal((5, DIMS))
    add_windowed(store, rng, centroids, 300)
    scope = Scope(clock.now_ms(), filters.parse(flt) if flt else None)
    cache = SearchCache(64 * 2**20, DIMS)
    for _ in range(8):
        query = clustered(rng, 1, centroids)[0]
        check_all_paths(store, cache, "u", query, k, threshold, scope)
    # Filtered, a search still returns the k best of those that match.
    found = search(store, cache, "u", query, k, 0, scope=scope)
    matching = sum(
        1
        for (meta,) in store.conn.execute("SELECT metadata FROM memories")
        if scope.filter is None or scope.filter.matches(json.loads(meta))
    )
    assert len(found) == min(k, matching)


def test_a_memory_scores_as_its_best_window(db):
    _, store = db
    rng = np.random.default_rng(3)
    target = rng.standard_normal(DIMS).astype(np.float32)
    noise = rng.standard_normal((5, DIMS)).astype(np.float32)
    long_memory = Memory(str(uuid.uuid4()), "t", "u", "long", {}, 1, 1)
    short = Memory(str(uuid.uuid4()), "t", "u", "short", {}, 2, 2)
    with store.write():
        store.insert_memories(
            [long_memory, short],
            [np.vstack([noise[:4], target[None, :]]), (target + noise[4] * 0.5)[None, :]],
        )
    cache = SearchCache(2**20, DIMS)
    for c in (None, cache):
        [(first, sim), (second, _)] = search(store, c, "u", target, 2, 0)
        assert first.id == long_memory.id and sim == pytest.approx(1.0)
        assert second.id == short.id


def test_a_cached_search_sees_writes_through_other_connections_at_once(db):
    """Searched outside a transaction, a warm cache is checked against the store every time."""
    path, store = db
    rng = np.random.default_rng(11)
    first = add(store, rng.standard_normal((20, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    check_all_paths(store, cache, "u", query, 5, 0)
    other = open_store(path)
    try:
        for step in range(6):
            if step % 2 == 0:
                [new] = add(other, query[None, :])
                assert ids(search(store, cache, "u", query, 5, 0))[0] == new.id
            else:
                with other.write():
                    other.delete_memory("t", first[step].id)
                assert first[step].id not in ids(search(store, cache, "u", query, 30, -1))
            with other.write():  # metadata alone: the answer carries the new one
                seq, previous = other.locate("t", first[0].id, 0)
                other.update_memory(seq, previous, _tagged(previous, step), None)
            [hit] = [m for m, _ in search(store, cache, "u", query, 30, -1) if m.id == first[0].id]
            assert hit.metadata == {"step": step}
            check_all_paths(store, cache, "u", query, 10, 0)
    finally:
        close_store(other)
    # Erased: nothing of the user is found, though the cache held them.
    with store.write():
        store.delete_user("t", "u")
    assert search(store, cache, "u", query, 5, -1) == []


def _tagged(memory, step):
    return dataclasses.replace(memory, metadata={"step": step}, version=memory.version + 1)


def test_memories_answered_before_are_not_read_again_while_the_user_is_unchanged(db):
    """A warm search whose winners were answered as of the same counters reads the counters only.

    Any write to the user's memories moves the counters, so what the
    snapshot kept is never answered past a change (the test above checks
    every kind of change through another connection).
    """
    _, store = db
    rng = np.random.default_rng(5)
    add(store, rng.standard_normal((40, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    expected = search(store, None, "u", query, 5, 0)
    assert search(store, cache, "u", query, 5, 0) == expected  # loads, reads the winners
    snap = cache.peek("t", "u")
    assert len(snap.records.found) == 5
    statements = _statements(store)
    with statements as seen:
        assert search(store, cache, "u", query, 5, 0) == expected
    assert len(seen) == 1 and not _reads_memories(seen[0]), seen
    # Counted with the snapshot's bytes: the cache's budget includes them.
    assert snap.records.nbytes > 0
    assert cache.nbytes >= snap.nbytes
    # More winners than were kept: those are read, with the counters, and kept.
    eight = search(store, None, "u", query, 8, 0)
    with statements as seen:
        assert search(store, cache, "u", query, 8, 0) == eight
    assert sum(_reads_memories(q) for q in seen) == 1, seen
    assert len(snap.records.found) == 8
    with statements as seen:
        assert search(store, cache, "u", query, 8, 0) == eight
    assert len(seen) == 1 and not _reads_memories(seen[0]), seen


def test_the_memories_a_snapshot_keeps_are_bounded(db, monkeypatch):
    _, store = db
    rng = np.random.default_rng(6)
    add(store, rng.standard_normal((30, DIMS)).astype(np.float32))
    monkeypatch.setattr(records_module.Records, "MAX_MEMORIES", 4)
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    for k in (3, 10, 30):
        assert search(store, cache, "u", query, k, -1) == search(store, None, "u", query, k, -1)
    assert len(cache.peek("t", "u").records.found) == 4
    monkeypatch.setattr(records_module.Records, "MAX_MEMORIES", 1024)
    monkeypatch.setattr(records_module.Records, "MAX_BYTES", 1)
    fresh = SearchCache(2**20, DIMS)
    assert search(store, fresh, "u", query, 30, -1) == search(store, None, "u", query, 30, -1)
    assert len(fresh.peek("t", "u").records.found) == 1


def _reads_memories(statement: str) -> bool:
    return re.search(r"\b(FROM|JOIN) memories\b", statement) is not None


class _statements:
    """The SQL statements a store runs inside ``with``: SQLite's trace, or PostgreSQL's log."""

    def __init__(self, store):
        self.store = store

    def __enter__(self):
        self.seen = []
        conn = self.store.conn
        if hasattr(conn, "set_trace_callback"):
            conn.set_trace_callback(self.seen.append)
        else:
            self._execute = self.store._execute

            def execute(query, params=None):
                self.seen.append(query)
                return self._execute(query, params)

            self.store._execute = execute
            self._send_prepared = self.store._send_prepared

            def send_prepared(name, params):  # sent ahead, read later (PgStore.memories_ahead)
                from memsvc.store.postgres.ahead import AHEAD

                self.seen.append(AHEAD[name][1])
                return self._send_prepared(name, params)

            self.store._send_prepared = send_prepared
        return self.seen

    def __exit__(self, *exc):
        conn = self.store.conn
        if hasattr(conn, "set_trace_callback"):
            conn.set_trace_callback(None)
        else:
            del self.store._execute
            del self.store._send_prepared


@pytest.mark.parametrize("windows", [[], [1], [1, 1, 1], [3], [1, 2, 1, 4, 1], [2, 2]])
def test_vector_ids_of_memories_are_each_memorys_windows_in_turn(windows):
    from memsvc.store import Entries

    firsts = [5 + sum(windows[:i]) + 7 * i for i in range(len(windows))]  # gaps between them
    entries = Entries.of_rows(
        (i, f, w, 0, None, 0, 0, None, "{}")
        for i, (f, w) in enumerate(zip(firsts, windows, strict=True))
    )
    expected = [f + k for f, w in zip(firsts, windows, strict=True) for k in range(w)]
    got = entries.vids()
    assert got.dtype == np.int64 and got.tolist() == expected
