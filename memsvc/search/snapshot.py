"""One user's memories and vectors as a search reads them: :class:`Snapshot`.

A snapshot is made by the builders (:mod:`.building`) and kept by the
search cache (:mod:`.cache`); searches read it, never change it.

The single-writer rule (:class:`Lineage`), here and nowhere else: the
snapshots made one from another share their arrays, allocated with room to
grow. A snapshot's readers look at its entries ``[:m]`` and rows ``[:n]``
only; an append writes past them, into the same arrays, and makes a new
snapshot. Only the newest snapshot of a lineage may be written through or
made into another (:meth:`Snapshot.derive`), and only the cache makes new
ones, one thread per user at a time (under the user's load lock): so an
append never writes where a published snapshot reads, and writing through
an older snapshot raises. The one write inside what readers see: a deleted
memory's private rows are zeroed, so that its vectors do not stay in the
worker's memory; a search ranking them meanwhile sees zeros and leaves the
memory out (:func:`.exact.rank`). Anything else that changes (which memories
are alive, expiry, metadata, filter columns) is copied first. What a
snapshot gathers as it is searched (records answered, filter columns built)
is its own, behind locks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing as t

import numpy as np

from ..store import UserState
from .columns import Columns
from .records import Records
from .snapshot_file import SnapshotFile


class Lineage:
    """Which snapshot of a lineage (snapshots sharing arrays) may write them: the newest."""

    __slots__ = ("writer",)

    def __init__(self) -> None:
        self.writer: Snapshot | None = None

    def check(self, snap: Snapshot) -> None:
        """Raise unless ``snap`` may write its arrays (it is the newest of its lineage)."""
        if self.writer is not snap:
            raise RuntimeError(
                "a search snapshot was written through after a newer one was made from it"
            )


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One user's memories and vectors as of ``state``.

    Entries (memories) ``[:m]`` and rows ``[:n]`` are valid; entry ``i``
    owns rows ``row_start[i] .. row_start[i] + windows[i] - 1``. Rows
    ``[:nb]`` are the snapshot ``file``'s (none without one), rows
    ``nb .. n - 1`` are ``matrix[: n - nb]``, held privately. A file may
    hold rows no entry owns (memories since deleted, or added after
    ``state``). The arrays are shared with the snapshots made from this one
    (see the module: the single-writer rule).
    """

    state: UserState
    m: int
    first_vid: np.ndarray  # int64 [mcap]
    windows: np.ndarray  # int64 [mcap]
    row_start: np.ndarray  # int64 [mcap]
    seqs: np.ndarray  # int64 [mcap]
    created: np.ndarray  # int64 [mcap]
    expires: np.ndarray  # int64 [mcap]; 0: never
    times: np.ndarray  # int64 [mcap]: occurredAt, else createdAt
    marks: np.ndarray  # int64 [mcap]: kind code + SUPERSEDED (memsvc.store.vector_source)
    valid_to: np.ndarray  # int64 [mcap]; 0: none
    alive: np.ndarray  # bool [mcap]
    metadata: list[str]  # JSON, [m]
    metadata_bytes: int  # what the metadata texts take (building.text_bytes)
    n: int
    matrix: np.ndarray  # float32 [cap, dims], the stored vectors as they are (private rows)
    scale: np.ndarray  # float32 [cap]: 1 / |row|, so that scores are cosines
    columns: Columns
    file: SnapshotFile | None = None
    lineage: Lineage = dataclasses.field(default_factory=Lineage, compare=False, repr=False)
    #: Memories searches answered with (never carried over to a new state).
    records: Records = dataclasses.field(default_factory=Records, init=False, compare=False)

    def __post_init__(self) -> None:
        if self.lineage.writer is None:  # the first of its lineage
            self.lineage.writer = self

    def derive(self, **changes: t.Any) -> Snapshot:
        """A snapshot made from this one, which must be the newest of its lineage; the new one
        is from then on (its arrays those given in ``changes``, or these)."""
        self.lineage.check(self)
        new = dataclasses.replace(self, **changes)
        self.lineage.writer = new
        return new

    @property
    def nb(self) -> int:
        """Rows in the shared file."""
        return self.file.header.rows if self.file is not None else 0

    @property
    def private_bytes(self) -> int:
        """What this view holds in this worker's own memory."""
        arrays = (
            self.first_vid, self.windows, self.row_start, self.seqs, self.created,
            self.expires, self.times, self.marks, self.valid_to, self.alive, self.matrix,
            self.scale,
        )  # fmt: skip
        return (
            sum(a.nbytes for a in arrays)
            + self.metadata_bytes
            + self.columns.nbytes
            + self.records.nbytes
        )

    @property
    def nbytes(self) -> int:
        """What this view uses: its private memory and the file it maps."""
        return self.private_bytes + (self.file.nbytes if self.file is not None else 0)

    @property
    def single(self) -> bool:
        """Every memory has one vector, in order, all private: rows and entries are the same."""
        return self.n == self.m and self.file is None

    @property
    def dead_rows(self) -> int:
        return int(np.sum(self.windows[: self.m][~self.alive[: self.m]]))

    @property
    def dims(self) -> int:
        return int(self.matrix.shape[1])

    def row_scores(self, query: np.ndarray) -> np.ndarray:
        """Float32 cosine of each row ``[:n]`` with ``query``."""
        q = np.asarray(query, dtype=np.float32)
        # Embedders return unit vectors, but scale anyway so that scores
        # are cosines whatever was stored.
        inverse = np.float32(1 / math.sqrt(q @ q))
        if self.file is None:
            out = self.matrix[: self.n] @ q
            out *= self.scale[: self.n]
            out *= inverse
            return out
        nb, n = self.nb, self.n
        out = np.empty(n, dtype=np.float32)
        np.matmul(self.file.matrix, q, out=out[:nb])
        out[:nb] *= self.file.scale
        if n > nb:
            np.matmul(self.matrix[: n - nb], q, out=out[nb:])
            out[nb:] *= self.scale[: n - nb]
        out *= inverse
        return out

    def entry_scores(self, row_scores: np.ndarray) -> np.ndarray:
        """Each memory's best window's score (``row_scores`` itself when that is what they are)."""
        if self.single:
            return row_scores
        if self.file is None:  # rows in entry order, each entry's after the last's
            return np.maximum.reduceat(row_scores, self.row_start[: self.m])
        if self._one_window:
            return row_scores[self.row_start[: self.m]]
        # Entries own ranges anywhere among the rows: reduce over [start, end) pairs.
        padded = np.append(row_scores, np.float32(-np.inf))
        return np.maximum.reduceat(padded, self._ranges)[::2]

    @functools.cached_property
    def _one_window(self) -> bool:
        return bool(np.all(self.windows[: self.m] == 1))

    @functools.cached_property
    def _ranges(self) -> np.ndarray:
        starts = self.row_start[: self.m]
        out = np.empty(2 * self.m, dtype=np.int64)
        out[0::2] = starts
        out[1::2] = starts + self.windows[: self.m]
        return out

    def take(self, rows: np.ndarray) -> np.ndarray:
        """These rows' stored vectors (float32), wherever they are."""
        if self.file is None:
            return self.matrix[rows]
        nb = self.nb
        out = np.empty((len(rows), self.dims), dtype=np.float32)
        in_file = rows < nb
        out[in_file] = self.file.matrix[rows[in_file]]
        out[~in_file] = self.matrix[rows[~in_file] - nb]
        return out

    def take_scale(self, rows: np.ndarray) -> np.ndarray:
        """These rows' ``1 / |row|``."""
        if self.file is None:
            return self.scale[rows]
        nb = self.nb
        out = np.empty(len(rows), dtype=np.float32)
        in_file = rows < nb
        out[in_file] = self.file.scale[rows[in_file]]
        out[~in_file] = self.scale[rows[~in_file] - nb]
        return out

    @functools.cached_property
    def _by_seq(self) -> tuple[np.ndarray, np.ndarray]:
        """The live entries' seqs, sorted, and their positions (built once, on demand)."""
        live = np.flatnonzero(self.alive[: self.m])
        order = np.argsort(self.seqs[live], kind="stable")
        return self.seqs[live][order], live[order]

    def positions(self, seqs: np.ndarray) -> np.ndarray | None:
        """The entry positions of these memories; None if any is not a live entry here."""
        sorted_seqs, where = self._by_seq
        at = np.searchsorted(sorted_seqs, seqs)
        if len(seqs) and (at.max() >= len(sorted_seqs) or (sorted_seqs[at] != seqs).any()):
            return None
        return where[at]

    def rows_of(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of these entries, and for each row its position in ``entries``."""
        if self.single:
            return entries, np.arange(len(entries))
        counts = self.windows[entries]
        owner = np.repeat(np.arange(len(entries)), counts)
        starts = np.repeat(self.row_start[entries], counts)
        offsets = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
        return starts + offsets, owner
