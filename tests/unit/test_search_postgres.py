"""Search on PostgreSQL: a warm search of a small user is one round trip, and exact;
a user's vectors load whole through a binary COPY.

Round trips are counted on a real psycopg connection: every wait for the
server's answer (a statement, a BEGIN, a COMMIT, a fetch of a server-side
cursor) is one. The search's read transaction of old took four.
"""

import contextlib
import uuid

import numpy as np
import psycopg
import pytest

from memsvc import clock
from memsvc import search as search_module
from memsvc.models import Memory
from memsvc.search import Scope
from memsvc.search import SearchCache
from memsvc.search.filters import parse as parse_filter
from memsvc.store.postgres import PgStore
from memsvc.store.postgres.connection import register_vector
from tests.support.stores import close_store
from tests.support.stores import open_store

DIMS = 32

pytestmark = pytest.mark.stores("postgres")


class CountingConnection(psycopg.Connection):
    """A psycopg connection that counts its round trips to the server."""

    round_trips = 0

    def wait(self, gen, interval=0.1, timeout=None):
        self.round_trips += 1
        return super().wait(gen, interval, timeout)


@pytest.fixture
def counted(database):
    conn = CountingConnection.connect(database, autocommit=True)
    store = PgStore(conn)
    store.migrate("test:random", DIMS)
    register_vector(conn)
    yield store, conn
    conn.close()


def add(store, vectors, user="u", metadata=None):
    memories = [
        Memory(str(uuid.uuid4()), "t", user, f"m{i}", metadata or {}, 1000 + i, 1000 + i)
        for i in range(len(vectors))
    ]
    with store.write():
        store.insert_memories(memories, vectors)
    return memories


def search(store, cache, query, k=5, scope=None):
    """A semantic search as memory.search makes it."""
    scope = scope or Scope(clock.now_ms())
    found = search_module.search(store, cache, "t", "u", query, "", k, 0.0, scope, "semantic")
    return [r.memory.id for r in found]


def trips(conn, fn):
    """What ``fn`` returns, and how many round trips it took."""
    before = conn.round_trips
    result = fn()
    return result, conn.round_trips - before


def test_counting_sees_every_round_trip(counted):
    store, conn = counted

    def read_state():
        with store.read():
            return store.user_state("t", "u")

    assert trips(conn, read_state) == (None, 3)  # BEGIN, the counters, COMMIT
    assert trips(conn, lambda: store.user_state("t", "u")) == (None, 1)


def test_a_warm_search_of_a_small_user_is_one_round_trip(counted, database):
    store, conn = counted
    rng = np.random.default_rng(1)
    add(store, rng.standard_normal((20, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    expected = search(store, None, query)  # the uncached path, in a transaction

    _, first = trips(conn, lambda: search(store, cache, query))
    assert first > 1  # the first search loads the user
    for k in (1, 5, 50):
        found, n = trips(conn, lambda k=k: search(store, cache, query, k))
        assert n == 1
        assert found == search(store, None, query, k)
    assert search(store, cache, query) == expected
    scope = Scope(clock.now_ms(), filter=parse_filter({"kind": "none-has-it"}))
    assert trips(conn, lambda: search(store, cache, query, scope=scope)) == ([], 1)

    # Written through another connection: the next search finds it, the
    # one after takes one round trip again.
    other = open_store(database)
    try:
        [new] = add(other, query[None, :])
    finally:
        close_store(other)
    found, n = trips(conn, lambda: search(store, cache, query))
    assert found[0] == new.id and n > 1
    found, n = trips(conn, lambda: search(store, cache, query))
    assert found[0] == new.id and n == 1


def test_a_large_user_is_checked_before_it_is_scanned(counted, monkeypatch):
    """Past SCAN_FIRST_FLOATS a wasted scan would cost more than round trips: a transaction."""
    store, conn = counted
    rng = np.random.default_rng(2)
    add(store, rng.standard_normal((40, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    search(store, cache, query)
    monkeypatch.setattr(search_module, "SCAN_FIRST_FLOATS", 39 * DIMS)
    found, n = trips(conn, lambda: search(store, cache, query))
    assert n == 4  # BEGIN, the counters, the memories, COMMIT
    assert found == search(store, None, query)


@pytest.mark.parametrize("dims, block", [(1536, 1 << 23), (1536, 1000), (7, 3), (32, 130)])
def test_a_users_vectors_load_whole_through_copy(database, monkeypatch, dims, block):
    """Blocks ending anywhere (mid-row, mid-header), rows of any size: the same vectors."""
    from memsvc.store.postgres import store as pg_store
    from tests.support.stores import raw_vector

    monkeypatch.setattr(pg_store._BinaryVectors, "_BLOCK", block)
    store = open_store(database)
    try:
        store.migrate("test:random", dims)
        rng = np.random.default_rng(dims)
        vectors = rng.standard_normal((60, dims)).astype(np.float32)
        memories = add(store, vectors)
        add(store, rng.standard_normal((5, dims)).astype(np.float32), user="other")
        with store.write():  # a gap in the vector ids
            store.delete_memory("t", memories[10].id)
        kept = np.delete(vectors, 10, axis=0)
        vids = np.delete(np.arange(1, 61), 10)
        for in_transaction in (False, True):
            with store.read() if in_transaction else contextlib.nullcontext():
                got = store.vectors("t", "u", vids, spare=3, whole_user=True)
            assert got.shape == (59 + 3, dims) and got.dtype == np.float32
            assert np.array_equal(got[:59], kept) and not got[59:].any()
        assert np.array_equal(raw_vector(store, "t", "u", 60), got[58])
        with pytest.raises(RuntimeError, match="found 59 of 60"):
            store.vectors("t", "u", np.arange(1, 61), whole_user=True)
        with pytest.raises(RuntimeError, match="more than the 9 expected"):
            store.vectors("t", "u", np.arange(1, 10), whole_user=True)
        empty = store.vectors("t", "nobody", np.zeros(0, dtype=np.int64), whole_user=True)
        assert len(empty) == 0
    finally:
        close_store(store)
