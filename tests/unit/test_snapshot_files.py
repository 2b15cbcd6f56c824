"""Snapshot files: only a whole, checked file of the right user is ever mapped."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from memsvc.search import snapshot_dir
from memsvc.search import snapshot_file
from tests.support.servers import REPO

DIMS = 16


def publish(folder, tenant="t", user="u", rows=50, user_key=1, generation=0, seed=0):
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((rows, DIMS)).astype(np.float32)
    vids = np.arange(1, 3 * rows + 1, 3, dtype=np.int64)
    scale = (1 / np.linalg.norm(matrix, axis=1)).astype(np.float32)
    files = snapshot_dir.SnapshotDir(str(folder), 2**30)
    path = files.file_of(tenant, user)
    header = snapshot_file.Header(tenant, user, user_key, generation, 0, rows, DIMS)
    snapshot_file.write_file(path, header, vids, scale, matrix)
    return path, vids, scale, matrix


def test_a_published_file_maps_exactly_what_was_written(tmp_path):
    path, vids, scale, matrix = publish(tmp_path)
    f = snapshot_file.open_file(path, "t", "u", DIMS)
    assert f is not None
    assert np.array_equal(f.vids, vids) and np.array_equal(f.scale, scale)
    assert np.array_equal(f.matrix, matrix)
    assert (f.header.user_key, f.header.generation, f.header.rows) == (1, 0, 50)
    assert f.rows_of(np.array([1, 2, 4, 148, 149])).tolist() == [0, -1, 1, 49, -1]
    assert os.stat(path).st_size == f.nbytes
    assert not f.matrix.flags.writeable  # mapped read-only: no worker can change it
    assert [n for n in os.listdir(tmp_path)] == [os.path.basename(path)]  # no temporary left


@pytest.mark.parametrize(
    "damage",
    ["truncated", "one byte longer", "header byte", "vector id byte", "empty", "format"],
)
def test_a_damaged_file_is_refused(tmp_path, damage):
    path, *_ = publish(tmp_path)
    data = bytearray(pathlib.Path(path).read_bytes())
    if damage == "truncated":
        data = data[:-1]
    elif damage == "one byte longer":
        data += b"\0"
    elif damage == "header byte":
        data[40] ^= 1  # user_key
    elif damage == "vector id byte":
        data[snapshot_file.HEADER_BYTES + 8] ^= 1
    elif damage == "empty":
        data = bytearray()
    else:
        data[8] = snapshot_file.FORMAT + 1
    pathlib.Path(path).write_bytes(bytes(data))
    assert snapshot_file.open_file(path, "t", "u", DIMS) is None


def test_rows_given_in_blocks_in_any_order_make_the_same_file(tmp_path):
    """A file written from blocks as a store reads them (any sizes, any order) is the same file."""
    (tmp_path / "whole").mkdir()
    path, vids, scale, matrix = publish(tmp_path / "whole")
    whole = pathlib.Path(path).read_bytes()
    rng = np.random.default_rng(1)
    order = np.arange(len(vids))
    order[10:20] = order[10:20][::-1]  # runs broken inside blocks too
    order[30:40] = rng.permutation(order[30:40])
    cuts = [0, 1, 7, 8, 25, 26, 44, len(order)]
    blocks = [order[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    blocks = [blocks[i] for i in rng.permutation(len(blocks))]
    (tmp_path / "blocks").mkdir()
    again = str(tmp_path / "blocks" / os.path.basename(path))
    header = snapshot_file.Header("t", "u", 1, 0, 0, len(vids), DIMS)
    snapshot_file.write_blocks(again, header, vids, ((at, matrix[at], scale[at]) for at in blocks))
    assert pathlib.Path(again).read_bytes() == whole
    assert os.listdir(tmp_path / "blocks") == [os.path.basename(path)]


@pytest.mark.parametrize("fault", ["a row missing", "a row twice", "a row past the end",
                                   "a negative position", "rows of another size"])  # fmt: skip
def test_blocks_that_do_not_give_every_row_once_publish_nothing(tmp_path, fault):
    path, vids, scale, matrix = publish(tmp_path)
    before = pathlib.Path(path).read_bytes()
    at = np.arange(len(vids))
    rows = matrix
    if fault == "a row missing":
        at, rows = at[:-1], rows[:-1]
    elif fault == "a row twice":
        at, rows = np.r_[at, 3], np.vstack([rows, rows[3]])
    elif fault == "a row past the end":
        at = at + 1
    elif fault == "a negative position":
        at = at - 1
    else:
        rows = np.hstack([rows, rows])
    blocks = [(at, rows, np.ones(len(at), dtype=np.float32))]
    header = snapshot_file.Header("t", "u", 1, 1, 0, len(vids), DIMS)
    with pytest.raises(ValueError):
        snapshot_file.write_blocks(path, header, vids, blocks)
    assert pathlib.Path(path).read_bytes() == before  # the old file stays, whole
    assert os.listdir(tmp_path) == [os.path.basename(path)]


def test_a_file_of_another_user_or_size_is_refused(tmp_path):
    path, *_ = publish(tmp_path, user="someone else")
    os.rename(path, snapshot_dir.SnapshotDir(str(tmp_path), 0).file_of("t", "u"))
    other = snapshot_dir.SnapshotDir(str(tmp_path), 0).file_of("t", "u")
    assert snapshot_file.open_file(other, "t", "u", DIMS) is None
    path, *_ = publish(tmp_path)
    assert snapshot_file.open_file(path, "t", "u", DIMS * 2) is None
    assert snapshot_file.open_file(path, "t", "u", DIMS) is not None


def test_a_writer_killed_half_way_leaves_the_old_file_whole(tmp_path):
    """SIGKILL while writing: the published file is the old one, whole; the leftover is swept."""
    path, vids, _, matrix = publish(tmp_path)
    script = textwrap.dedent(
        f"""
        import numpy as np
        from memsvc.search import snapshot_file
        rows, dims = 200_000, 1024  # 50 chunks of 16 MB, a twentieth of a second each
        def slow(a, b):
            import time; time.sleep(0.05)
            return np.ones((b - a, dims), dtype=np.float32)
        snapshot_file.write_file({path!r}, snapshot_file.Header("t", "u", 1, 0, 0, rows, dims),
                          np.arange(rows, dtype=np.int64), np.ones(rows, dtype=np.float32), slow)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    end = time.monotonic() + 60
    while not [n for n in os.listdir(tmp_path) if n.endswith(snapshot_file.TMP_SUFFIX)]:
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.005)
    time.sleep(0.2)  # some of it written
    assert proc.poll() is None  # still writing
    proc.kill()
    proc.wait()
    f = snapshot_file.open_file(path, "t", "u", DIMS)
    assert f is not None and np.array_equal(f.vids, vids) and np.array_equal(f.matrix, matrix)
    files = snapshot_dir.SnapshotDir(str(tmp_path), 2**30)
    assert files.files() == [path]  # the temporary file is no snapshot file
    [leftover] = [n for n in os.listdir(tmp_path) if n.endswith(snapshot_file.TMP_SUFFIX)]
    assert snapshot_file.read_header(str(tmp_path / leftover)) is None  # nor would it be, renamed
    assert files.sweep_temporary() == 1
    assert os.listdir(tmp_path) == [os.path.basename(path)]


def test_the_folder_keeps_within_its_budget_least_recently_used_first(tmp_path):
    first, *_ = publish(tmp_path, user="a")
    size = os.stat(first).st_size
    second, *_ = publish(tmp_path, user="b")
    files = snapshot_dir.SnapshotDir(str(tmp_path), 2 * size)
    os.utime(first, (time.time() - 100, time.time() - 100))
    third, *_ = publish(tmp_path, user="c")
    files.fit(keep=third)
    assert sorted(files.files()) == sorted([second, third])


def test_clearing_removes_files_and_leftovers(tmp_path):
    publish(tmp_path)
    (tmp_path / ".x.vec.123.abcd.tmp").write_bytes(b"partial")
    assert snapshot_dir.clear_snapshots(str(tmp_path)) == 2
    assert os.listdir(tmp_path) == []
    assert snapshot_dir.clear_snapshots(str(tmp_path / "missing")) == 0
