"""A snapshot file: one copy of a large user's vectors, memory-mapped by every worker of a box.

A file holds some of one user's vectors as they are stored, keyed by vector
id, at one ``(user_key, generation)``: within those a vector id always
means the same stored vector (ids are never reused; new text gets new ids,
re-embedding a new generation, an erased user who comes back a new
``user_key``). So a file is never *stale*, only incomplete: a worker maps
the rows it finds there and reads any others from the store. A file is
never changed once published; a new one replaces it whole.

Layout (little-endian), every section aligned to 64 bytes, the matrix to a
page::

    header   4096 bytes: magic, format, dims, rows, user_key, generation,
             deletes (the user's counter when the rows were listed), the
             file's total length, tenant and user id, CRC-32 of the header
             and of the vector ids
    vids     int64[rows], ascending
    scale    float32[rows], 1 / |row|
    matrix   float32[rows, dims]

Publishing writes a temporary file in the same folder (rows a block at a
time, wherever they belong, the header last: until it is complete the file
is no snapshot file at all), flushes it to disk, renames it into place and
flushes the folder: a reader sees the old file or the new one, whole, never
part of one. A writer killed half way leaves only its temporary file
(``.*.tmp``, never opened by a reader, and with no header) for
:meth:`~.snapshot_dir.SnapshotDir.sweep_temporary` to remove. :func:`open_file` checks the
magic, format, user, dimensions, exact length and both checksums before it
maps anything, and refuses (None) a file that fails any of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import mmap
import os
import secrets
import struct
import typing as t
import zlib

import numpy as np

log = logging.getLogger(__name__)

MAGIC = b"MEMSVCSV"
FORMAT = 1
HEADER_BYTES = 4096
SUFFIX = ".vec"
TMP_SUFFIX = ".tmp"
LOCK_NAME = ".writing.lock"
# magic, format, dims, rows, user_key, generation, deletes, length, tenant len, user len
_FIXED = struct.Struct("<8sIIqqqqqII")
_CRC = struct.Struct("<II")  # header CRC (of everything before it), vids CRC
#: Longest tenant + user id (UTF-8 bytes) a file can name; longer ones stay in-process.
MAX_NAME_BYTES = HEADER_BYTES - _FIXED.size - _CRC.size


def name_bytes(tenant: str, user_id: str) -> tuple[bytes, bytes]:
    return tenant.encode("utf-8", "surrogatepass"), user_id.encode("utf-8", "surrogatepass")


def fits(tenant: str, user_id: str) -> bool:
    """Whether a file can name this user."""
    a, b = name_bytes(tenant, user_id)
    return len(a) + len(b) <= MAX_NAME_BYTES


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _layout(rows: int, dims: int) -> tuple[int, int, int, int]:
    """Offsets of the vids, scale and matrix, and the file's length."""
    vids_at = HEADER_BYTES
    scale_at = _align(vids_at + rows * 8, 64)
    matrix_at = _align(scale_at + rows * 4, mmap.PAGESIZE)
    return vids_at, scale_at, matrix_at, matrix_at + rows * dims * 4


@dataclasses.dataclass(frozen=True)
class Header:
    tenant: str
    user_id: str
    user_key: int
    generation: int
    deletes: int
    rows: int
    dims: int


@dataclasses.dataclass(eq=False)
class SnapshotFile:
    """A published file, mapped read-only: its vectors are shared with every worker mapping it."""

    path: str
    inode: tuple[int, int]  # (st_dev, st_ino): which file this was, to notice a replacement
    header: Header
    vids: np.ndarray  # int64 [rows], ascending
    scale: np.ndarray  # float32 [rows]
    matrix: np.ndarray  # float32 [rows, dims]
    _map: mmap.mmap | None

    @property
    def nbytes(self) -> int:
        return _layout(self.header.rows, self.header.dims)[3]

    def rows_of(self, vids: np.ndarray) -> np.ndarray:
        """Each vector id's row here; -1 where this file does not hold it."""
        at = np.searchsorted(self.vids, vids)
        at = np.minimum(at, max(len(self.vids) - 1, 0))
        found = (self.vids[at] == vids) if len(self.vids) else np.zeros(len(vids), dtype=bool)
        return np.where(found, at, -1)


def read_header(path: str) -> tuple[Header, int] | None:
    """A file's header and the CRC its vids must have; None if it is not a valid header."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return _read_header(fd)
    finally:
        os.close(fd)


def _read_header(fd: int) -> tuple[Header, int] | None:
    try:
        raw = os.pread(fd, HEADER_BYTES, 0)
        size = os.fstat(fd).st_size
    except OSError:
        return None
    if len(raw) < HEADER_BYTES:
        return None
    magic, fmt, dims, rows, user_key, generation, deletes, length, tlen, ulen = _FIXED.unpack_from(
        raw
    )
    if magic != MAGIC or fmt != FORMAT or tlen + ulen > MAX_NAME_BYTES:
        return None
    names_end = _FIXED.size + tlen + ulen
    header_crc, vids_crc = _CRC.unpack_from(raw, names_end)
    if zlib.crc32(raw[:names_end]) != header_crc:
        return None
    if rows < 0 or dims <= 0 or length != size or length != _layout(rows, dims)[3]:
        return None
    try:
        tenant = raw[_FIXED.size : _FIXED.size + tlen].decode("utf-8", "surrogatepass")
        user_id = raw[_FIXED.size + tlen : names_end].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return Header(tenant, user_id, user_key, generation, deletes, rows, dims), vids_crc


def open_file(path: str, tenant: str, user_id: str, dims: int) -> SnapshotFile | None:
    """The file at ``path`` mapped, if it is a whole, valid file of this user; else None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        checked = _read_header(fd)  # this very file, whatever is renamed meanwhile
        if checked is None:
            return None
        header, vids_crc = checked
        if (header.tenant, header.user_id, header.dims) != (tenant, user_id, dims):
            return None
        if st.st_size == 0:
            return None
        mapped = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    rows = header.rows
    vids_at, scale_at, matrix_at, _ = _layout(rows, dims)
    vids = np.frombuffer(mapped, dtype="<i8", count=rows, offset=vids_at)
    if zlib.crc32(vids.data) != vids_crc or (rows > 1 and bool(np.any(np.diff(vids) <= 0))):
        del vids  # no view may outlive the map
        mapped.close()
        return None
    scale = np.frombuffer(mapped, dtype="<f4", count=rows, offset=scale_at)
    matrix = np.frombuffer(mapped, dtype="<f4", count=rows * dims, offset=matrix_at)
    return SnapshotFile(
        path, (st.st_dev, st.st_ino), header, vids, scale, matrix.reshape(rows, dims), mapped
    )


def write_file(
    path: str,
    header: Header,
    vids: np.ndarray,
    scale: np.ndarray,
    matrix: np.ndarray | t.Callable[[int, int], np.ndarray],
) -> None:
    """Publish a file at ``path``: written aside, flushed, renamed into place, folder flushed.

    ``matrix``: the rows, or a function giving rows ``[a:b]`` (written a
    chunk at a time, so that no whole copy is made).
    """
    rows, dims = header.rows, header.dims
    assert scale.shape == (rows,)
    chunk = max(1, (16 << 20) // max(dims * 4, 1))  # 16 MB at a time

    def blocks() -> t.Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for start in range(0, rows, chunk):
            end = min(start + chunk, rows)
            block = matrix[start:end] if isinstance(matrix, np.ndarray) else matrix(start, end)
            yield np.arange(start, end), block, scale[start:end]

    write_blocks(path, header, vids, blocks())


def write_blocks(
    path: str,
    header: Header,
    vids: np.ndarray,
    blocks: t.Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> None:
    """Publish a file at ``path`` whose rows come a block at a time, in any order.

    ``blocks``: ``(at, rows, scale)``, rows ``at`` (positions in ``vids``)
    of the matrix and their ``1 / |row|``. Each block is written where it
    belongs as it comes, so the caller never needs the whole matrix in
    memory (a user's first file is written straight from the database).
    Every row must come exactly once (ValueError otherwise: nothing is
    published). The header is written last: until the file is complete it
    is no snapshot file at all, even under its final name. Then, as
    always: flushed, renamed into place, folder flushed.
    """
    rows, dims = header.rows, header.dims
    assert vids.shape == (rows,)
    tenant, user = name_bytes(header.tenant, header.user_id)
    vids_at, scale_at, matrix_at, length = _layout(rows, dims)
    vids = np.ascontiguousarray(vids, dtype="<i8")
    fixed = _FIXED.pack(
        MAGIC, FORMAT, dims, rows, header.user_key, header.generation, header.deletes, length,
        len(tenant), len(user),
    )  # fmt: skip
    named = fixed + tenant + user
    head = named + _CRC.pack(zlib.crc32(named), zlib.crc32(vids.data))
    folder = os.path.dirname(path)
    tmp = os.path.join(
        folder, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}"
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.ftruncate(fd, length)  # the gaps between sections read as zeros
            _pwrite(fd, vids, vids_at)
            scale = np.zeros(rows, dtype="<f4")
            seen = np.zeros(rows, dtype=bool)
            given = 0
            for at, block, block_scale in blocks:
                at = np.asarray(at, dtype=np.int64)
                if (
                    block.shape != (len(at), dims)
                    or block_scale.shape != (len(at),)
                    or (len(at) and (int(at.min()) < 0 or int(at.max()) >= rows))
                ):
                    raise ValueError("rows of the wrong shape for a snapshot file")
                seen[at] = True
                given += len(at)
                scale[at] = block_scale
                block = np.ascontiguousarray(block, dtype="<f4")
                # Rows of consecutive positions (most of them) go in one write.
                breaks = np.flatnonzero(np.diff(at) != 1) + 1
                for lo, hi in zip([0, *breaks.tolist()], [*breaks.tolist(), len(at)], strict=True):
                    _pwrite(fd, block[lo:hi], matrix_at + int(at[lo]) * dims * 4)
                del block
            if given != rows or not seen.all():
                raise ValueError(
                    f"a snapshot file of {rows} rows was given {given}, "
                    f"{rows - int(seen.sum())} of its rows never"
                )
            _pwrite(fd, scale, scale_at)
            _pwrite(fd, head.ljust(HEADER_BYTES, b"\0"), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_dir(folder)


def _pwrite(fd: int, data: t.Any, offset: int) -> None:
    """All of ``data`` (bytes, or a contiguous array) at ``offset``."""
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
