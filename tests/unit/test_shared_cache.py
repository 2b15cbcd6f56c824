"""Workers sharing snapshot files: one copy, always current, never read wrong, within budget."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

from memsvc.search import SearchCache
from memsvc.search import shared
from tests.unit.test_search import DIMS
from tests.unit.test_search import add
from tests.unit.test_search import check_all_paths
from tests.unit.test_search import db  # noqa: F401 (a fixture)
from tests.unit.test_search import ids
from tests.unit.test_search import search


def workers(folder: pathlib.Path, n: int = 2, max_bytes: int = 64 * 2**20, min_bytes: int = 0):
    """The search caches of ``n`` workers of one box."""
    return [SearchCache(max_bytes, DIMS, shared_dir=str(folder / "snapshots"),
                        share_min_bytes=min_bytes)
            for _ in range(n)]  # fmt: skip


def temporary(folder: pathlib.Path) -> list[str]:
    return [n for n in os.listdir(folder / "snapshots") if n.endswith(shared.TMP_SUFFIX)]


def test_workers_map_one_file_and_see_each_others_writes(db, tmp_path):  # noqa: F811
    _, store = db
    rng = np.random.default_rng(1)
    memories = add(store, rng.standard_normal((300, DIMS)).astype(np.float32))
    a, b = workers(tmp_path)
    query = rng.standard_normal(DIMS).astype(np.float32)
    for cache in (a, b):
        check_all_paths(store, cache, "u", query, 10, 0)
    sa, sb = a._entries[("t", "u")], b._entries[("t", "u")]
    assert sa.file is not None and sb.file is not None and sa.file.inode == sb.file.inode
    # Privately, each holds far less than the file: the vectors are the file's.
    assert sa.matrix.nbytes == sb.matrix.nbytes == 0
    assert len(a.files.files()) == 1 and temporary(tmp_path) == []
    for step in range(12):
        if step % 3 == 0:
            with store.write():
                store.delete_memory("t", memories.pop(int(rng.integers(len(memories)))).id)
        else:
            memories += add(store, rng.standard_normal((8 * step, DIMS)).astype(np.float32))
        # Whichever worker searches first, and whatever file it publishes, both are exact.
        for cache in (a, b) if step % 2 else (b, a):
            check_all_paths(store, cache, "u", query, 10, 0)
    [newest] = add(store, query[None, :])
    for cache in (a, b):
        with store.read():
            assert ids(search(store, cache, "u", query, 1, 0)) == [newest.id]


def test_a_damaged_file_is_not_read_and_is_replaced(db, tmp_path):  # noqa: F811
    _, store = db
    rng = np.random.default_rng(2)
    add(store, rng.standard_normal((100, DIMS)).astype(np.float32))
    [a] = workers(tmp_path, 1)
    query = rng.standard_normal(DIMS).astype(np.float32)
    check_all_paths(store, a, "u", query, 10, 0)
    path = a.files.file_of("t", "u")
    # Another worker finds the file cut short (as no rename would leave it).
    data = pathlib.Path(path).read_bytes()
    pathlib.Path(path).write_bytes(data[: len(data) // 2])
    [b] = workers(tmp_path, 1)
    check_all_paths(store, b, "u", query, 10, 0)
    assert shared.open_file(path, "t", "u", DIMS) is not None  # published whole again


def test_small_users_stay_in_the_worker(db, tmp_path):  # noqa: F811
    _, store = db
    rng = np.random.default_rng(3)
    add(store, rng.standard_normal((10, DIMS)).astype(np.float32), user="small")
    add(store, rng.standard_normal((400, DIMS)).astype(np.float32), user="large")
    [a] = workers(tmp_path, 1, min_bytes=100 * (DIMS * 4 + 4))
    query = rng.standard_normal(DIMS).astype(np.float32)
    for user in ("small", "large"):
        check_all_paths(store, a, user, query, 5, 0)
    assert a._entries[("t", "small")].file is None
    assert a._entries[("t", "large")].file is not None
    assert a.files.files() == [a.files.file_of("t", "large")]


def test_the_files_count_once_against_the_budget(db, tmp_path):  # noqa: F811
    _, store = db
    rng = np.random.default_rng(4)
    for u in range(6):
        add(store, rng.standard_normal((200, DIMS)).astype(np.float32), user=f"u{u}")
    one = 200 * (DIMS * 4 + 12) + shared.HEADER_BYTES + 4096
    caches = workers(tmp_path, 3, max_bytes=3 * one)
    query = rng.standard_normal(DIMS).astype(np.float32)
    for u in range(6):
        for cache in caches:
            check_all_paths(store, cache, f"u{u}", query, 5, 0)
            assert cache.nbytes <= cache.max_bytes
            on_disk = sum(os.stat(p).st_size for p in cache.files.files())
            assert on_disk <= cache.max_bytes
    # Three workers, three users' files: one copy each, not one per worker.
    assert len(caches[0].files.files()) == 3


def test_erasing_a_user_removes_their_file_and_others_views_go(db, tmp_path):  # noqa: F811
    from memsvc.services import memories as service

    _, store = db
    rng = np.random.default_rng(5)
    add(store, rng.standard_normal((50, DIMS)).astype(np.float32))
    a, b = workers(tmp_path)
    query = rng.standard_normal(DIMS).astype(np.float32)
    for cache in (a, b):
        check_all_paths(store, cache, "u", query, 5, 0)
    service.delete_all(store, "t", "u", a)
    assert a.files.files() == [] and ("t", "u") not in a._entries
    with store.read():
        assert search(store, b, "u", query, 5, 0) == []
    b.prune(store)
    assert ("t", "u") not in b._entries


@pytest.mark.parametrize("kind", ["deleted memory", "erased user", "every vector replaced"])
def test_maintenance_leaves_no_erased_vector_in_a_file(db, tmp_path, kind):  # noqa: F811
    _, store = db
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((60, DIMS)).astype(np.float32)
    memories = add(store, vectors)
    a, b = workers(tmp_path)
    query = rng.standard_normal(DIMS).astype(np.float32)
    check_all_paths(store, a, "u", query, 5, 0)
    victim = vectors[7].astype("<f4").tobytes()
    path = pathlib.Path(a.files.file_of("t", "u"))
    assert victim in path.read_bytes()
    with store.write():
        if kind == "deleted memory":
            store.delete_memory("t", memories[7].id)
        elif kind == "erased user":
            for m in memories:
                store.delete_memory("t", m.id)
        else:
            store.conn.execute(
                "UPDATE memory_users SET generation = generation + 1 WHERE user_id = 'u'"
            )
    b.prune(store)  # a worker that never searched this user
    leftovers = b"".join(p.read_bytes() for p in (tmp_path / "snapshots").iterdir())
    assert victim not in leftovers
    if kind == "deleted memory":
        f = shared.open_file(str(path), "t", "u", DIMS)
        assert f is not None and f.header.rows == 59
        check_all_paths(store, a, "u", query, 5, 0)
    else:
        assert b.files.files() == [] and temporary(tmp_path) == []


def test_a_folder_that_cannot_be_written_keeps_users_in_the_worker(db, tmp_path):  # noqa: F811
    _, store = db
    rng = np.random.default_rng(7)
    add(store, rng.standard_normal((100, DIMS)).astype(np.float32))
    (tmp_path / "snapshots").write_text("a file where the folder should be")
    [a] = workers(tmp_path, 1)
    query = rng.standard_normal(DIMS).astype(np.float32)
    for _ in range(2):
        check_all_paths(store, a, "u", query, 10, 0)
    assert a._entries[("t", "u")].file is None
    a.prune(store)  # and maintenance copes too
