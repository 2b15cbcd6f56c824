"""Workers sharing snapshot files: one copy, always current, never read wrong, within budget."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

from memsvc.models import Memory
from memsvc.search import SearchCache
from memsvc.search import building
from memsvc.search import snapshot_file
from memsvc.store.postgres import vector_copy
from memsvc.store.sqlite import vec0
from tests.support.servers import REPO
from tests.support.stores import close_store
from tests.support.stores import open_store
from tests.unit.test_search import DIMS
from tests.unit.test_search import add
from tests.unit.test_search import check_all_paths
from tests.unit.test_search import db  # noqa: F401 (a fixture)
from tests.unit.test_search import ids
from tests.unit.test_search import search

MB = 2**20


def workers(folder: pathlib.Path, n: int = 2, max_bytes: int = 64 * 2**20, min_bytes: int = 0):
    """The search caches of ``n`` workers of one box."""
    return [SearchCache(max_bytes, DIMS, shared_dir=str(folder / "snapshots"),
                        share_min_bytes=min_bytes)
            for _ in range(n)]  # fmt: skip


def temporary(folder: pathlib.Path) -> list[str]:
    return [n for n in os.listdir(folder / "snapshots") if n.endswith(snapshot_file.TMP_SUFFIX)]


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
    assert snapshot_file.open_file(path, "t", "u", DIMS) is not None  # published whole again


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
    one = 200 * (DIMS * 4 + 12) + snapshot_file.HEADER_BYTES + 4096
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
        f = snapshot_file.open_file(str(path), "t", "u", DIMS)
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


def add_windows(store, rng, count, user="u"):
    """``count`` memories of 1 to 3 windows each, some deleted: gaps in the vector ids."""
    memories = [Memory(str(uuid.uuid4()), "t", user, f"m{i}", {}, 1000 + i, 1000 + i)
                for i in range(count)]  # fmt: skip
    vectors = [rng.standard_normal((1 + i % 3, DIMS)).astype(np.float32) for i in range(count)]
    with store.write():
        store.insert_memories(memories, vectors)
    with store.write():
        for m in memories[::9]:
            store.delete_memory("t", m.id)


def small_blocks(monkeypatch):
    monkeypatch.setattr(vec0, "BLOCK_BYTES", 10 * DIMS * 4)  # 10 rows
    monkeypatch.setattr(vector_copy, "BLOCK_VECTORS", 3)
    monkeypatch.setattr(vector_copy.VectorsHandedOn, "BLOCK_BYTES", 10 * DIMS * 4)  # 10 rows


def test_a_first_load_writes_the_file_that_publishing_the_whole_user_would(
    db,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Straight from the store, a block at a time: the same bytes as from a whole snapshot."""
    _, store = db
    small_blocks(monkeypatch)
    rng = np.random.default_rng(8)
    add_windows(store, rng, 120)
    [a] = workers(tmp_path / "now", 1)
    query = rng.standard_normal(DIMS).astype(np.float32)
    check_all_paths(store, a, "u", query, 10, 0)
    view = a._entries[("t", "u")]
    assert view.file is not None and view.matrix.nbytes == 0  # every vector is the file's
    written = pathlib.Path(a.files.file_of("t", "u")).read_bytes()
    # As the first load wrote it before: every vector read into memory, then published.
    [b] = workers(tmp_path / "before", 1)
    with store.read():
        whole = building.load(store, "t", "u", store.user_state("t", "u"))
    assert b.sharing.publish("t", "u", whole) is not None
    assert pathlib.Path(b.files.file_of("t", "u")).read_bytes() == written
    assert temporary(tmp_path / "now") == []


@pytest.mark.parametrize("fault", ["the disk fills up", "vectors of another size"])
def test_a_first_file_that_cannot_be_written_leaves_the_user_in_the_worker(
    db,  # noqa: F811
    tmp_path,
    monkeypatch,
    fault,
):
    """Half way through the blocks: no file, no leftover, the read ended whole, searches exact."""
    _, store = db
    small_blocks(monkeypatch)
    rng = np.random.default_rng(9)
    add_windows(store, rng, 120)
    dims = DIMS
    if fault == "the disk fills up":
        pwrite, calls = snapshot_file._pwrite, []

        def failing(fd, data, offset):
            calls.append(offset)
            if len(calls) > 4:
                raise OSError(errno.ENOSPC, "No space left on device")
            pwrite(fd, data, offset)

        monkeypatch.setattr(snapshot_file, "_pwrite", failing)
    else:
        dims = DIMS + 1  # this worker's embedder is not the one the vectors came from
    [a] = [SearchCache(64 * MB, dims, shared_dir=str(tmp_path / "snapshots"), share_min_bytes=0)]
    query = rng.standard_normal(DIMS).astype(np.float32)
    for _ in range(2):
        check_all_paths(store, a, "u", query, 10, 0)  # (PostgreSQL: a COPY cancelled fails this)
    assert a._entries[("t", "u")].file is None
    assert os.listdir(tmp_path / "snapshots") in ([], [snapshot_file.LOCK_NAME])
    assert a.sharing.write_failed == (fault == "the disk fills up")


ROWS, WIDE = 8000, 1536  # a 49 MB matrix

PEAK_SCRIPT = """
import json, os, sys, threading, time
import numpy as np
from memsvc import clock
from memsvc.search import Scope, SearchCache, SearchRequest, search as run_search
from memsvc.store.postgres import vector_copy
from memsvc.store.sqlite import vec0
from tests.support.stores import open_store

vec0.BLOCK_BYTES = vector_copy.VectorsHandedOn.BLOCK_BYTES = 1 << 20
store = open_store(sys.argv[1])
cache = SearchCache(1 << 30, {wide}, shared_dir=sys.argv[2], share_min_bytes=0)
query = np.ones({wide}, dtype=np.float32)


def search(user):
    request = SearchRequest("t", user, query, "", 5, 0.0, Scope(clock.now_ms()))
    return run_search(store, cache, request)


def anonymous():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) * 1024


search("small")  # every code path run once: what the large user adds is the large user
before = anonymous()
peak, done = before, False


def sample():
    global peak
    while not done:
        peak = max(peak, anonymous())
        time.sleep(0.0005)


sampler = threading.Thread(target=sample)
sampler.start()
found = search("large")
done = True
sampler.join()
print(json.dumps({{"peak": peak - before, "after": anonymous() - before, "found": len(found),
                  "file": cache.peek("t", "large").file is not None}}))
"""


def test_a_first_load_never_holds_the_users_vectors_in_the_workers_memory(database, tmp_path):
    """The loading process's anonymous memory peaks at a few blocks, not at the matrix."""
    store = open_store(database)
    try:
        store.migrate("test:random", WIDE)
        rng = np.random.default_rng(10)
        for user, count in (("small", 10), ("large", ROWS)):
            for start in range(0, count, 2000):
                n = min(2000, count - start)
                memories = [Memory(str(uuid.uuid4()), "t", user, f"m{i}", {}, 1000 + i, 1000 + i)
                            for i in range(start, start + n)]  # fmt: skip
                with store.write():
                    store.insert_memories(memories, rng.standard_normal((n, WIDE)).astype("f4"))
    finally:
        close_store(store)
    script = textwrap.dedent(PEAK_SCRIPT.format(wide=WIDE))
    out = subprocess.run(
        [sys.executable, "-c", script, database, str(tmp_path / "snapshots")],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    measured = json.loads(out.stdout)
    matrix = ROWS * WIDE * 4
    assert measured["found"] == 5 and measured["file"]
    # Before, the whole matrix (49 MB) was read into the process, then written.
    assert measured["peak"] < 0.2 * matrix, measured
