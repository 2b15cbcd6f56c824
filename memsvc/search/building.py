"""Making a user's snapshot (:mod:`.snapshot`): loading it, bringing it up to date, compacting it.

Every function here returns a new snapshot and leaves the one it was given
as its readers see it; those that write into shared arrays keep the
single-writer rule (:class:`~.snapshot.Lineage`), which
:meth:`~.snapshot.Snapshot.derive` checks.

* :func:`load`: a user read from the store, all in this process;
* :func:`assemble`: a user over a snapshot file, the vectors it lacks from
  elsewhere; :func:`rebased`: a snapshot moved over a new file;
* :func:`appended`: new memories at the end (their vectors from the file,
  the store, or wherever the caller says);
* :func:`relisted`: memories gone masked (their private rows zeroed),
  changed metadata and expiry taken over;
* :func:`compacted`: without the memories gone.
"""

from __future__ import annotations

import sys
import typing as t

import numpy as np

from ..store import Entries
from ..store import UserState
from ..store import VectorSource
from .columns import DEFAULT_BUDGET
from .columns import Columns
from .snapshot import Snapshot
from .snapshot_file import SnapshotFile

#: Vectors of some memories (whole, in vector-id order), wherever they are.
VectorsOf = t.Callable[[Entries], np.ndarray]

_ENTRY_ARRAYS = (
    "first_vid", "windows", "row_start", "seqs", "created", "expires", "times", "marks",
    "valid_to", "alive",
)  # fmt: skip


def load(
    source: VectorSource,
    tenant: str,
    user_id: str,
    state: UserState,
    entries: Entries | None = None,
    column_budget: int = DEFAULT_BUDGET,
) -> Snapshot:
    """A user's snapshot read from the store (``entries``: their memories, if read already)."""
    if entries is None:
        entries = source.entries(tenant, user_id)
    rows = int(entries.windows.sum())
    # Room to grow by a sixteenth before the first copy.
    matrix = source.vectors(tenant, user_id, entries.vids(), spare=rows // 16 + 8, whole_user=True)
    snap = Snapshot(
        state=state,
        m=0,
        **_empty_entries(len(entries) + len(entries) // 16 + 8),
        metadata=[],
        metadata_bytes=0,
        n=0,
        matrix=matrix,
        scale=np.zeros(len(matrix), dtype=np.float32),
        columns=Columns([], column_budget),
    )
    return appended(snap, entries, None)


def assemble(
    state: UserState,
    entries: Entries,
    file: SnapshotFile,
    vectors_of: VectorsOf,
    column_budget: int,
) -> Snapshot:
    """A view of these memories over ``file``; vectors it lacks from ``vectors_of``."""
    snap = Snapshot(
        state=state,
        m=0,
        **_empty_entries(len(entries) + len(entries) // 16 + 8),
        metadata=[],
        metadata_bytes=0,
        n=file.header.rows,
        matrix=np.zeros((0, file.header.dims), dtype=np.float32),
        scale=np.zeros(0, dtype=np.float32),
        columns=Columns([], column_budget),
        file=file,
    )
    return appended(snap, entries, vectors_of)


def live_entries(snap: Snapshot) -> tuple[np.ndarray, Entries]:
    """The positions of ``snap``'s live memories, and those memories."""
    keep = np.flatnonzero(snap.alive[: snap.m])
    entries = Entries(
        snap.seqs[keep], snap.first_vid[keep], snap.windows[keep], snap.created[keep],
        snap.expires[keep], snap.times[keep], snap.marks[keep], snap.valid_to[keep],
        [snap.metadata[i] for i in keep.tolist()],
    )  # fmt: skip
    return keep, entries


def rebased(snap: Snapshot, file: SnapshotFile) -> Snapshot:
    """``snap``'s live memories over ``file``: rows it lacks copied from ``snap``."""
    keep, entries = live_entries(snap)
    firsts = snap.first_vid[keep]  # ascending: memories come in vector-id order

    def vectors_of(missing: Entries) -> np.ndarray:
        at = keep[np.searchsorted(firsts, missing.first_vid)]
        return snap.take(snap.rows_of(at)[0])

    return assemble(snap.state, entries, file, vectors_of, snap.columns.budget)


def appended(snap: Snapshot, entries: Entries, vectors: VectorsOf | None) -> Snapshot:
    """``snap`` with these memories (in vector-id order) added at the end.

    Their vectors are the file's where it holds them; the others are what
    ``vectors(missing)`` returns for the memories missing. None: they are in
    ``snap.matrix`` already, rows from ``snap.n`` (a first load, no file).
    """
    k = len(entries)
    if not k:
        return snap
    snap.lineage.check(snap)
    m, n, nb = snap.m, snap.n, snap.nb
    if m + k > len(snap.seqs):
        capacity = m + k + (m + k) // 4 + 8
        snap = snap.derive(**{name: _grow(getattr(snap, name), m, capacity)
                              for name in _ENTRY_ARRAYS})  # fmt: skip
    windows, first = entries.windows, entries.first_vid
    if snap.file is not None:
        start = snap.file.rows_of(first)
        whole = (start >= 0) & (snap.file.rows_of(first + windows - 1) == start + windows - 1)
        start[~whole] = -1
    else:
        start = np.full(k, -1, dtype=np.int64)
    missing = start < 0
    rows = int(windows[missing].sum())
    if rows:
        if vectors is not None:
            got = vectors(entries.take(np.flatnonzero(missing)))
            if n - nb and got.shape[1] != snap.matrix.shape[1]:
                raise ValueError("vector dimension changed without a new generation")
            if n - nb + rows > len(snap.matrix) or snap.matrix.shape[1] != got.shape[1]:
                # Growing copies every row, so grow by a quarter at a time.
                capacity = n - nb + rows + (n - nb + rows) // 4 + 8
                snap = snap.derive(
                    matrix=_grow(snap.matrix, n - nb, capacity, got.shape[1]),
                    scale=_grow(snap.scale, n - nb, capacity),
                )
            snap.matrix[n - nb : n - nb + rows] = got[:rows]
        held = snap.matrix[n - nb : n - nb + rows]
        snap.scale[n - nb : n - nb + rows] = inverse_norms(held)
        start[missing] = n + np.cumsum(windows[missing]) - windows[missing]
    snap.first_vid[m : m + k] = first
    snap.windows[m : m + k] = windows
    snap.row_start[m : m + k] = start
    snap.seqs[m : m + k] = entries.seqs
    snap.created[m : m + k] = entries.created
    snap.expires[m : m + k] = entries.expires
    snap.times[m : m + k] = entries.times
    snap.marks[m : m + k] = entries.marks
    snap.valid_to[m : m + k] = entries.valid_to
    snap.alive[m : m + k] = True
    metadata = snap.metadata + entries.metadata
    return snap.derive(
        m=m + k,
        n=n + rows,
        metadata=metadata,
        metadata_bytes=snap.metadata_bytes + text_bytes(entries.metadata),
        columns=snap.columns.extended(entries.metadata, metadata),
    )


def relisted(snap: Snapshot, present: Entries) -> Snapshot:
    """``snap`` with memories no longer ``present`` masked, and changed metadata or expiry."""
    snap.lineage.check(snap)
    m, nb = snap.m, snap.nb
    firsts = snap.first_vid[:m]
    if len(present):
        at = np.minimum(np.searchsorted(present.first_vid, firsts), len(present) - 1)
        found = present.first_vid[at] == firsts
    else:
        at, found = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool)
    alive = snap.alive.copy()
    expires = snap.expires.copy()
    # What an update may change without new vectors: time, supersession.
    times, marks, valid_to = snap.times.copy(), snap.marks.copy(), snap.valid_to.copy()
    for i in np.flatnonzero(alive[:m] & ~found).tolist():
        alive[i] = False
        # The vectors of a deleted memory do not stay in this worker's
        # memory (a file's are rewritten by prune).
        start = int(snap.row_start[i])
        if start >= nb:
            snap.matrix[start - nb : start - nb + int(snap.windows[i])] = 0
    expires[:m][found] = present.expires[at[found]]
    times[:m][found] = present.times[at[found]]
    marks[:m][found] = present.marks[at[found]]
    valid_to[:m][found] = present.valid_to[at[found]]
    metadata = snap.metadata
    changed = False
    for i, j in zip(np.flatnonzero(found).tolist(), at[found].tolist(), strict=True):
        if metadata[i] != present.metadata[j]:
            if not changed:
                metadata, changed = list(metadata), True
            metadata[i] = present.metadata[j]
    # Deletions alone leave every memory's metadata, and so the columns, as they were.
    return snap.derive(
        alive=alive,
        expires=expires,
        times=times,
        marks=marks,
        valid_to=valid_to,
        metadata=metadata,
        metadata_bytes=text_bytes(metadata) if changed else snap.metadata_bytes,
        columns=Columns(metadata, snap.columns.budget) if changed else snap.columns,
    )


def compacted(snap: Snapshot) -> Snapshot:
    """``snap`` without its deleted memories (all in this process: no file)."""
    keep = np.flatnonzero(snap.alive[: snap.m])
    rows, _ = snap.rows_of(keep)
    windows = snap.windows[keep]
    metadata = [snap.metadata[i] for i in keep.tolist()]
    return snap.derive(
        m=len(keep),
        first_vid=snap.first_vid[keep],
        windows=windows,
        row_start=np.cumsum(windows) - windows,
        seqs=snap.seqs[keep],
        created=snap.created[keep],
        expires=snap.expires[keep],
        times=snap.times[keep],
        marks=snap.marks[keep],
        valid_to=snap.valid_to[keep],
        alive=np.ones(len(keep), dtype=bool),
        metadata=metadata,
        metadata_bytes=text_bytes(metadata),
        n=len(rows),
        matrix=np.ascontiguousarray(snap.matrix[rows]),
        scale=snap.scale[rows],
        columns=Columns(metadata, snap.columns.budget),
    )


def text_bytes(texts: t.Iterable[str]) -> int:
    """Memory held by metadata texts: each distinct object once, and its slot in a list."""
    distinct: dict[int, str] = {}
    slots = 0
    for text in texts:
        distinct[id(text)] = text
        slots += 1
    return sum(sys.getsizeof(text) for text in distinct.values()) + 8 * slots


def inverse_norms(matrix: np.ndarray) -> np.ndarray:
    if matrix.size == 0:
        return np.zeros(len(matrix), dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
    return np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0).astype(np.float32)


def _empty_entries(capacity: int) -> dict[str, t.Any]:
    return {
        name: np.zeros(capacity, dtype=bool if name == "alive" else np.int64)
        for name in _ENTRY_ARRAYS
    }


def _grow(array: np.ndarray, n: int, capacity: int, width: int | None = None) -> np.ndarray:
    shape: tuple[int, ...] = (capacity,) if array.ndim == 1 else (capacity, width or 0)
    out = np.zeros(shape, dtype=array.dtype)
    if n:
        out[:n] = array[:n]
    return out
