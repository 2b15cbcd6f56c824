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
from memsvc.models import Memory
from memsvc.search import Scope
from memsvc.search import SearchCache
from memsvc.search import SearchRequest
from memsvc.search import search as run_search
from memsvc.search import semantic
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
    found = run_search(store, cache, SearchRequest("t", "u", query, "", k, 0.0, scope, "semantic"))
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


def test_a_warm_search_survives_its_statement_being_deallocated(counted):
    """psycopg deallocates every prepared statement after a rollback: the search reads
    the usual way once, prepares it again, and is back to one round trip."""
    store, conn = counted
    rng = np.random.default_rng(3)
    add(store, rng.standard_normal((20, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    expected = search(store, None, query)
    search(store, cache, query)  # loads the user
    assert trips(conn, lambda: search(store, cache, query)) == (expected, 1)
    for _ in range(6):  # psycopg prepares its own statements after 5 runs
        conn.execute("SELECT count(*) FROM memories WHERE tenant = %s", ("t",))
    with contextlib.suppress(RuntimeError), store.write():
        raise RuntimeError("rolled back")
    conn.execute("SELECT count(*) FROM memories WHERE tenant = %s", ("t",))  # DEALLOCATE ALL
    assert not conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
    found, n = trips(conn, lambda: search(store, cache, query))
    assert found == expected and n > 1
    assert trips(conn, lambda: search(store, cache, query)) == (expected, 1)
    # Prepared by someone else meanwhile (memsvc does not know): the same.
    conn.execute("DEALLOCATE ALL")
    found, n = trips(conn, lambda: search(store, cache, query))
    assert found == expected and n > 1
    assert trips(conn, lambda: search(store, cache, query)) == (expected, 1)


def test_an_answer_asked_ahead_and_never_read_leaves_the_connection_free(counted):
    store, conn = counted
    rng = np.random.default_rng(4)
    memories = add(store, rng.standard_normal((3, DIMS)).astype(np.float32))
    with store.read():
        state = store.user_state("t", "u")
        seqs = sorted(store.entries_by_seq("t", "u", range(1, 100)))
    assert state is not None
    with pytest.raises(ZeroDivisionError):
        with store.memories_ahead("t", "u", state, seqs):
            1 / 0  # noqa: B018
    with store.memories_ahead("t", "u", state, seqs) as read:
        found = read(seqs[:2])
    assert found is not None and [found[s].id for s in seqs[:2]] == [m.id for m in memories[:2]]
    with store.memories_ahead("t", "u", state, seqs[:1]) as read:
        found = read(seqs[1:])  # not among the candidates: read the usual way
    assert found is not None and found[seqs[1]].id == memories[1].id
    add(store, rng.standard_normal((1, DIMS)).astype(np.float32))
    with store.memories_ahead("t", "u", state, seqs) as read:
        assert read(seqs) is None  # the counters moved on
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_large_user_is_checked_before_it_is_scanned(counted, monkeypatch):
    """Past SCAN_FIRST_FLOATS a wasted scan would cost more than round trips: a transaction."""
    store, conn = counted
    rng = np.random.default_rng(2)
    add(store, rng.standard_normal((40, DIMS)).astype(np.float32))
    cache = SearchCache(2**20, DIMS)
    query = rng.standard_normal(DIMS).astype(np.float32)
    search(store, cache, query)
    monkeypatch.setattr(semantic, "SCAN_FIRST_FLOATS", 39 * DIMS)
    found, n = trips(conn, lambda: search(store, cache, query))
    assert n == 4  # BEGIN, the counters, the memories, COMMIT
    assert found == search(store, None, query)


@pytest.mark.parametrize("dims, block", [(1536, 32), (1536, 1), (7, 3), (32, 1000)])
def test_a_users_vectors_load_whole_through_copy(database, monkeypatch, dims, block):
    """Blocks of any number of vectors, vectors of any size: the same vectors."""
    from memsvc.store.postgres import vector_copy
    from tests.support.stores import raw_vector

    monkeypatch.setattr(vector_copy, "BLOCK_VECTORS", block)
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
        assert empty.shape == (0, 0)
        assert store.vectors("t", "nobody", np.zeros(0, dtype=np.int64), 2, True).shape == (2, 0)
    finally:
        close_store(store)


def test_a_copy_of_vector_blocks_reads_alike_wherever_its_chunks_end(database):
    """The stream cut anywhere (mid-header, mid-row, several rows at once): the same array."""
    from memsvc.store.postgres.vector_copy import VectorBlocks

    store = open_store(database)
    try:
        store.migrate("test:random", 7)
        rng = np.random.default_rng(3)
        vectors = rng.standard_normal((10, 7)).astype(np.float32)
        add(store, vectors)
        stream = bytearray()
        with store.conn.cursor() as cur:
            with cur.copy(
                "COPY (SELECT b.n, a.count, a.floats FROM (VALUES (1::bigint, 1, 4), (2, 5, 8), "
                "(3, 9, 10), (4, 11, 99)) AS b (n, low, high) CROSS JOIN LATERAL ("
                "SELECT count(*) AS count, string_agg(floats, ''::bytea ORDER BY vid) AS floats "
                "FROM memory_vectors WHERE vid BETWEEN b.low AND b.high) AS a) "
                "TO STDOUT (FORMAT BINARY)"
            ) as copy:
                for data in copy:
                    stream += data
    finally:
        close_store(store)
    for cut in (1, 2, 5, 19, 31, 64, 1000, len(stream)):
        reader = VectorBlocks([0, 4, 8, 10], [4, 4, 2, 0], spare=1)
        for start in range(0, len(stream), cut):
            reader.feed(bytes(stream[start : start + cut]))
        got = reader.finish("these")
        assert got.shape == (11, 7) and np.array_equal(got[:10], vectors) and not got[10].any()
    with pytest.raises(RuntimeError, match="these: found 10 of 11"):
        reader = VectorBlocks([0, 4, 8, 10], [4, 4, 2, 1], spare=0)
        reader.feed(stream)
        reader.finish("these")
    with pytest.raises(RuntimeError, match="did not end"):
        reader = VectorBlocks([0, 4, 8, 10], [4, 4, 2, 0], spare=0)
        reader.feed(stream[:-2])
        reader.finish("these")


def test_every_vector_written_has_its_floats_beside_it_in_its_row(database):
    """``floats`` is PostgreSQL's own copy of ``embedding``: added, replaced by an update,
    re-embedded; kept in the row (storage MAIN) in every table memsvc makes."""
    import dataclasses

    store = open_store(database)

    def check(dims, n):
        rows = store.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE floats = "
            "substring(vector_send(embedding) FROM 5)), min(octet_length(floats)), "
            "pg_relation_size('memory_vectors') FROM memory_vectors"
        ).fetchone()
        assert rows[:3] == (n, n, 4 * dims)
        assert rows[3] >= n * 4 * dims  # in the table itself, not out of line
        (storage,) = store.conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memory_vectors'::regclass "
            "AND attname = 'floats'"
        ).fetchone()
        assert storage == "m"

    try:
        store.migrate("test:random", 1536)
        rng = np.random.default_rng(5)
        vectors = rng.standard_normal((3, 1536)).astype(np.float32)
        memories = add(store, vectors)
        check(1536, 3)
        with store.read():
            [(seq, previous)] = [
                (s, m) for s, m in store.page("t", "u", clock.now_ms()) if m.id == memories[0].id
            ]
        new = rng.standard_normal((2, 1536)).astype(np.float32)  # two windows now
        with store.write():
            store.update_memory(seq, previous, dataclasses.replace(previous, version=2), new)
        check(1536, 4)
        with store.read():
            vids = np.array(
                [
                    v
                    for e in store.entries("t", "u")
                    for v in range(e.first_vid, e.first_vid + e.windows)
                ]
            )
            got = store.vectors("t", "u", vids, whole_user=True)
        assert np.array_equal(got, np.concatenate([vectors[1:], new]))

        with store.write():
            store.start_reembed("test:other")
        with store.read():
            todo = store.unstaged_memories(10)
        staged = [(s, rng.standard_normal((1, 8)).astype(np.float32)) for s, _ in todo]
        with store.write():
            store.stage_vectors("test:other", staged)
        with store.write():
            store.switch_to_staged("test:other", 8)
        check(8, 3)
    finally:
        close_store(store)
