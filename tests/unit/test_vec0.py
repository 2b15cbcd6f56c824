"""memsvc.store.sqlite.vec0 against sqlite-vec itself: the storage layout memsvc reads directly."""

import pathlib
import uuid

import numpy as np
import pytest

from memsvc import clock
from memsvc import search
from memsvc.models import Memory
from memsvc.store.sqlite import vec0

pytestmark = pytest.mark.stores("sqlite")  # sqlite-vec's own storage

DIMS = 16


def memory(user="u", tenant="t"):
    return Memory(str(uuid.uuid4()), tenant, user, "text", {}, 1000, 1000)


def unit(v):
    return (v / np.linalg.norm(v)).astype(np.float32)


def rand(seed=0):
    return unit(np.random.default_rng(seed).standard_normal(DIMS))


def add(store, vectors, user="u", tenant="t"):
    memories = [memory(user, tenant) for _ in range(len(vectors))]
    with store.write():
        store.insert_memories(memories, np.asarray(vectors, dtype=np.float32))
    return memories


def count(store, table):
    return store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_chunk_reader_agrees_with_vec0(store):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((203, DIMS)).astype(np.float32)
    memories = add(store, vectors)
    add(store, rng.standard_normal((11, DIMS)).astype(np.float32), user="other")
    with store.write():
        for m in memories[::7]:
            store.delete_memory("t", m.id)
    vids = np.array([e.first_vid for e in store.entries("t", "u")], dtype=np.int64)
    got = vec0.read_vectors(store.conn, "t", "u", vids, spare=3)
    assert len(vids) == 203 - len(memories[::7]) and len(got) == len(vids) + 3
    assert not got[len(vids) :].any()
    got = got[: len(vids)]
    for vid, vector in zip(vids, got, strict=True):
        (blob,) = store.conn.execute(
            "SELECT embedding FROM memory_vectors WHERE rowid = ?", (int(vid),)
        ).fetchone()
        assert np.array_equal(np.frombuffer(blob, dtype=np.float32), vector)
    some = vids[::5]
    subset = vec0.read_vectors(store.conn, "t", "u", some, subset=True)
    assert np.array_equal(subset, got[::5])


def test_vector_chunks_are_looked_up_by_index_not_scan(store):
    plan = store.conn.execute(
        "EXPLAIN QUERY PLAN SELECT chunk_id, validity, rowids FROM memory_vectors_chunks "
        "WHERE partition00 = ? AND partition01 = ?",
        ("t", "u"),
    ).fetchall()
    assert "memory_vectors_chunks_by_partition" in str(plan)


def test_many_users_each_get_their_own_chunks(store):
    for u in range(20):
        add(store, [rand(seed=u)], user=f"u{u}")
    chunks = count(store, "memory_vectors_chunks")
    assert chunks == 20
    for u in range(20):
        scope = search.Scope(clock.now_ms())
        [found] = search.search(
            store, None, search.SearchRequest("t", f"u{u}", rand(seed=u), "", 5, 0, scope)
        )
        assert found.similarity == pytest.approx(1, abs=1e-6)


def test_erasing_a_partition_leaves_vec0_as_if_its_vectors_were_deleted_one_by_one(store):
    rng = np.random.default_rng(5)
    doomed = add(store, rng.standard_normal((37, DIMS)).astype(np.float32), user="doomed")
    kept = add(store, rng.standard_normal((13, DIMS)).astype(np.float32), user="kept")
    marker = np.full(DIMS, 1234.5, dtype=np.float32)
    with store.write():
        store.insert_memories([memory("doomed")], marker[None, :])
    doomed_vids = [e.first_vid for e in store.entries("t", "doomed")]
    with store.write():
        assert vec0.erase_partition(store.conn, "t", "doomed") == 38
    # Nothing of the partition is left: not through KNN, lookups, or the chunk tables.
    assert store.knn("t", "doomed", rand(), 10) == []
    for vid in doomed_vids:
        assert (
            store.conn.execute(
                "SELECT embedding FROM memory_vectors WHERE rowid = ?", (vid,)
            ).fetchall()
            == []
        )
    assert count(store, "memory_vectors_rowids") == 13
    store.checkpoint()
    assert (
        marker.tobytes()
        not in pathlib.Path(
            store.conn.execute(
                "SELECT file FROM pragma_database_list WHERE name = 'main'"
            ).fetchone()[0]
        ).read_bytes()
    )
    # The other partition is whole, and the erased one takes new vectors.
    kept_vids = np.array([e.first_vid for e in store.entries("t", "kept")], dtype=np.int64)
    assert len(vec0.read_vectors(store.conn, "t", "kept", kept_vids)) == 13
    assert len(store.knn("t", "kept", rand(), 20)) == 13
    add(store, [rand(seed=9)], user="doomed")
    [(_, distance, _)] = store.knn("t", "doomed", rand(seed=9), 5)
    assert distance == pytest.approx(0, abs=1e-6)
    assert len(doomed) == 37 and len(kept) == 13
