"""What memsvc knows of sqlite-vec's private storage layout, in one place.

A ``vec0`` table keeps its vectors in shadow tables, ``chunk_size`` slots
per chunk and one chunk list per partition (here: tenant + user).
``tests/unit/test_vec0.py`` checks this module against vec0's own answers,
so a sqlite-vec upgrade that changes the layout fails there first.
"""

from __future__ import annotations

import typing as t

import numpy as np

from ..vector_source import block_array
from .connection import Connection

# vec0 allocates chunk_size vectors per partition (tenant + user) up front.
# 8 is the smallest it accepts: a user with 3 memories then costs 8 slots
# instead of the default 1024 (6 MB at 1536 dims). Large users span many
# chunks; bench/storage.py measures both cases.
CHUNK_SIZE = 8

#: sqlite-vec refuses KNN queries for more rows than this.
KNN_MAX = 4096

TABLE = [
    """CREATE VIRTUAL TABLE memory_vectors USING vec0(
            tenant TEXT PARTITION KEY,
            user_id TEXT PARTITION KEY,
            embedding FLOAT[{dimensions}] distance_metric=cosine,
            chunk_size={chunk_size}
        )""",
    # vec0 looks up a partition's chunks with a WHERE on these columns of
    # its shadow table, which has no index of its own: without this one
    # every search and insert scans the chunks of all users.
    "CREATE INDEX memory_vectors_chunks_by_partition "
    "ON memory_vectors_chunks (partition00, partition01)",
]


#: The tables vec0 keeps ``memory_vectors`` in.
SHADOW_TABLES = (
    "memory_vectors_chunks",
    "memory_vectors_info",
    "memory_vectors_rowids",
    "memory_vectors_vector_chunks00",
)


def render(statement: str, dimensions: int) -> str:
    return statement.replace("{dimensions}", str(int(dimensions))).replace(
        "{chunk_size}", str(CHUNK_SIZE)
    )


#: About how many bytes of vectors :func:`vector_blocks` hands on at a time.
BLOCK_BYTES = 8 << 20


def _chunks(
    conn: Connection, tenant: str, user_id: str
) -> t.Iterator[tuple[np.ndarray, np.ndarray, bytes]]:
    """Each chunk of one partition: its slots' rowids, which slots are in use, its vectors' blob.

    A chunk row holds a validity bitmap (bit i little-endian: slot i is in
    use), the slots' rowids (int64) and, in the vector chunk table, the
    slots' vectors (float32) back to back.
    """
    cursor = conn.execute(
        # vec0 declares a column named "rowid" in this table, which hides
        # the real rowid (the chunk id) unless it is called _rowid_; a join
        # on the column would scan every vector chunk.
        "SELECT c.validity, c.rowids, v.vectors "
        "FROM memory_vectors_chunks AS c "
        "JOIN memory_vectors_vector_chunks00 AS v ON v._rowid_ = c.chunk_id "
        "WHERE c.partition00 = ? AND c.partition01 = ?",
        (tenant, user_id),
    )
    for validity, rowids, blob in cursor:
        ids = np.frombuffer(rowids, dtype=np.int64)
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        yield ids, valid[: len(ids)].astype(bool), blob


def read_vectors(
    conn: Connection,
    tenant: str,
    user_id: str,
    seqs: np.ndarray,
    spare: int = 0,
    subset: bool = False,
) -> np.ndarray:
    """The vectors of ``seqs`` (ascending rowids) of one partition, plus ``spare`` zero rows.

    ``seqs`` are all of the partition's rowids, or with ``subset`` some of
    them (every chunk is still read). Each chunk is copied straight into
    its rows of one array: no intermediate copies.
    """
    n = len(seqs)
    out: np.ndarray | None = None
    filled = 0
    for ids, valid, blob in _chunks(conn, tenant, user_id):
        if subset:
            valid &= np.isin(ids, seqs)
        if not valid.any():
            continue
        vecs = np.frombuffer(blob, dtype=np.float32).reshape(len(ids), -1)
        if out is None:
            out = np.zeros((n + spare, vecs.shape[1]), dtype=np.float32)
        where = np.searchsorted(seqs, ids[valid])
        out[where] = vecs[valid]
        filled += len(where)
    if out is None or filled != n:
        raise RuntimeError(f"vectors of {tenant}/{user_id}: found {filled} of {n}")
    return out


def vector_blocks(
    conn: Connection, tenant: str, user_id: str, seqs: np.ndarray
) -> t.Iterator[tuple[np.ndarray, np.ndarray]]:
    """All of one partition's vectors, about :data:`BLOCK_BYTES` at a time: ``(at, rows)``.

    ``seqs`` are all of the partition's rowids, ascending; ``at`` are the
    rows' positions in ``seqs`` (chunks come in chunk order, so mostly
    ascending). Each block is a new array (:func:`~memsvc.store.vector_source.block_array`),
    filled straight from the chunks.
    RuntimeError if a stored rowid is not one of ``seqs``, or there are not as many.
    """
    n = len(seqs)
    found = 0
    block: np.ndarray | None = None
    at = np.zeros(0, dtype=np.int64)
    held = 0
    for ids, valid, blob in _chunks(conn, tenant, user_id):
        count = int(valid.sum())
        if not count:
            continue
        vecs = np.frombuffer(blob, dtype=np.float32).reshape(len(ids), -1)
        if block is not None and held + count > len(block):
            yield at[:held], block[:held]
            block = None
        if block is None:
            block = block_array(max(BLOCK_BYTES // vecs[0].nbytes, count), vecs.shape[1])
            at = np.empty(len(block), dtype=np.int64)
            held = 0
        if count < len(ids):
            ids, vecs = ids[valid], vecs[valid]
        where = np.searchsorted(seqs, ids)
        if int(where.max()) >= n or not np.array_equal(seqs[where], ids):
            raise RuntimeError(f"vectors of {tenant}/{user_id}: a vector that is not theirs")
        at[held : held + count] = where
        block[held : held + count] = vecs
        held += count
        found += count
    if block is not None and held:
        yield at[:held], block[:held]
    if found != n:
        raise RuntimeError(f"vectors of {tenant}/{user_id}: found {found} of {n}")


def erase_partition(conn: Connection, tenant: str, user_id: str) -> int:
    """Delete every vector of one partition at once; returns how many.

    What deleting them one by one through vec0 leaves, without rewriting
    each chunk once per vector: the partition's chunk rows and vector
    blobs go, and the rowid index entries of the vectors they held.
    Call inside a write transaction.
    """
    where = "partition00 = ? AND partition01 = ?"
    chunks = conn.execute(
        f"SELECT chunk_id, validity, rowids FROM memory_vectors_chunks WHERE {where}",
        (tenant, user_id),
    ).fetchall()
    vids: list[int] = []
    for _, validity, rowids in chunks:
        ids = np.frombuffer(rowids, dtype=np.int64)
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        vids += ids[valid[: len(ids)].astype(bool)].tolist()
    conn.executemany("DELETE FROM memory_vectors_rowids WHERE rowid = ?", [(v,) for v in vids])
    conn.executemany(
        "DELETE FROM memory_vectors_vector_chunks00 WHERE rowid = ?", [(c[0],) for c in chunks]
    )
    conn.execute(f"DELETE FROM memory_vectors_chunks WHERE {where}", (tenant, user_id))
    return len(vids)
