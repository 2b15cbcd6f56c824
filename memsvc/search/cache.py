"""Users' vectors held in memory as float32 matrices, kept coherent with the database.

A search (:func:`memsvc.search.nearest`) scans a user's matrix with one
matrix-vector product, at memory-bandwidth speed, instead of sqlite-vec's
scalar KNN, then ranks the candidates exactly like the uncached path.

Each worker process holds its own cache. Before every search the user's
change counters (:class:`memsvc.store.UserState`, one indexed row, changed
in the same transaction as any write to that user's memories) are read
inside the same read transaction as the search itself:

* counters unchanged: the cached snapshot is current;
* ``max_vid`` grew: new vectors (new memories, or new text), appended;
* ``deletes`` or ``updates`` grew: the user's memories are listed again
  (vector ids, metadata, expiry; no vectors): gone ones are masked out,
  changed metadata and expiry taken over;
* ``generation`` changed (every vector replaced) or ``user_key`` (the user
  was erased and is back): the user is reloaded.

So a memory added, changed or deleted through any process is found, changed
or gone in the very next search everywhere. Memory use is bounded by
``max_bytes``: the least recently searched users are dropped first, and a
user too large to fit is searched through the store instead. Rows of deleted
memories are zeroed when they are masked, and :meth:`SearchCache.prune`
drops users whose memories changed, so erased vectors do not linger.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import threading
import typing as t

import numpy as np

from ..store import Entry
from ..store import Store
from ..store import UserState
from .filters import DEFAULT_BUDGET
from .filters import Columns

# Masked-out (deleted) rows are compacted away once they are this share.
_MAX_DEAD = 0.25


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One user's memories and vectors as of ``state``; never changed once published.

    Entries (memories) ``[:m]`` and matrix rows ``[:n]`` are valid; entry
    ``i`` owns rows ``row_start[i] .. row_start[i] + windows[i] - 1``.
    Appends may write past ``m`` and ``n`` of the same arrays and publish a
    new snapshot: readers of this one never look past its ``m`` and ``n``.
    """

    state: UserState
    m: int
    first_vid: np.ndarray  # int64 [mcap]
    windows: np.ndarray  # int64 [mcap]
    row_start: np.ndarray  # int64 [mcap]
    seqs: np.ndarray  # int64 [mcap]
    created: np.ndarray  # int64 [mcap]
    expires: np.ndarray  # int64 [mcap]; 0: never
    alive: np.ndarray  # bool [mcap]
    metadata: list[str]  # JSON, [m]
    metadata_bytes: int  # what the metadata texts take, as _text_bytes counts it
    n: int
    matrix: np.ndarray  # float32 [cap, dims], the stored vectors as they are
    scale: np.ndarray  # float32 [cap]: 1 / |row|, so that scores are cosines
    columns: Columns

    @property
    def nbytes(self) -> int:
        arrays = (
            self.first_vid, self.windows, self.row_start, self.seqs, self.created,
            self.expires, self.alive, self.matrix, self.scale,
        )  # fmt: skip
        return sum(a.nbytes for a in arrays) + self.metadata_bytes + self.columns.nbytes

    @property
    def single(self) -> bool:
        """Every memory has one vector: rows and entries are the same."""
        return self.n == self.m

    @property
    def dead_rows(self) -> int:
        return int(np.sum(self.windows[: self.m][~self.alive[: self.m]]))

    def row_scores(self, query: np.ndarray) -> np.ndarray:
        """Float32 cosine of each row ``[:n]`` with ``query``."""
        q = np.asarray(query, dtype=np.float32)
        # Embedders return unit vectors, but scale anyway so that scores
        # are cosines whatever was stored.
        return (self.matrix[: self.n] @ q) * self.scale[: self.n] * np.float32(1 / math.sqrt(q @ q))

    def entry_scores(self, row_scores: np.ndarray) -> np.ndarray:
        """Each memory's best window's score."""
        if self.single:
            return row_scores.copy()
        return np.maximum.reduceat(row_scores, self.row_start[: self.m])

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
        """The matrix rows of these entries, and for each row its position in ``entries``."""
        counts = self.windows[entries]
        owner = np.repeat(np.arange(len(entries)), counts)
        starts = np.repeat(self.row_start[entries], counts)
        offsets = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
        return starts + offsets, owner


class SearchCache:
    """Users' vectors in memory, for exact search; bounded to ``max_bytes``."""

    def __init__(self, max_bytes: int, dimensions: int):
        self.max_bytes = max_bytes
        # What one cached vector costs: its float32 row and scale, at least.
        self.row_bytes = dimensions * 4 + 4
        self._entries: collections.OrderedDict[tuple[str, str], Snapshot] = (
            collections.OrderedDict()
        )
        # What each snapshot was counted as (its filter columns grow as it is searched).
        self._sizes: dict[tuple[str, str], int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str], threading.Lock] = {}

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def column_budget(self) -> int:
        """What one user's filter columns may keep: an eighth of the cache."""
        return self.max_bytes // 8

    def current(self, store: Store, tenant: str, user_id: str, state: UserState) -> Snapshot | None:
        """The user's snapshot as of ``state``, refreshed if needed; None: not cached.

        Call inside the read transaction that read ``state``. None when the
        user is too large to cache, or when this transaction began before
        the cached data was read (a cache never moves backwards).
        """
        key = (tenant, user_id)
        snap = self._get(key)
        if snap is not None and snap.state == state:
            return snap
        if snap is not None and _behind(state, snap.state):
            return None
        with self._lock:
            loading = self._loading.setdefault(key, threading.Lock())
        # One thread refreshes a user at a time; the others then find it done.
        with loading:
            snap = self._get(key)
            if snap is not None and snap.state == state:
                return snap
            if snap is not None and _behind(state, snap.state):
                return None
            new = self._refresh(store, tenant, user_id, state, snap)
            self._put(key, new)
            return new

    def settle(self, tenant: str, user_id: str, snap: Snapshot) -> None:
        """Count what a snapshot's filter columns take now, evicting others if over budget."""
        key = (tenant, user_id)
        with self._lock:
            if self._entries.get(key) is not snap:
                return  # replaced or dropped meanwhile
            size = snap.nbytes
            self._bytes += size - self._sizes[key]
            self._sizes[key] = size
            self._evict()

    def forget(self, tenant: str, user_id: str) -> None:
        """Drop a user's snapshot (erased: nothing of theirs is kept)."""
        self._put((tenant, user_id), None)

    def prune(self, store: Store) -> int:
        """Drop every cached user whose memories changed since cached; returns how many.

        Run now and then (memsvc does, every few seconds per worker), so
        that vectors of deleted memories do not stay in memory for users no
        one searches again.
        """
        with self._lock:
            cached = [(key, snap.state) for key, snap in self._entries.items()]
        dropped = 0
        with store.read():
            for key, state in cached:
                if store.user_state(*key) != state:
                    self._put(key, None)
                    dropped += 1
        return dropped

    def users(self) -> int:
        return len(self._entries)

    # -- keeping snapshots current ---------------------------------------------------

    def _refresh(
        self,
        store: Store,
        tenant: str,
        user_id: str,
        state: UserState,
        old: Snapshot | None,
    ) -> Snapshot | None:
        if (
            old is None
            or old.state.user_key != state.user_key
            or old.state.generation != state.generation
        ):
            return load(
                store, tenant, user_id, state, self.row_bytes, self.max_bytes, self.column_budget
            )
        snap = old
        if state.deletes != old.state.deletes or state.updates != old.state.updates:
            snap = _relisted(snap, store.entries(tenant, user_id))
        if state.max_vid > old.state.max_vid:
            added = store.entries(tenant, user_id, after_vid=old.state.max_vid)
            if (snap.n + sum(e.windows for e in added)) * self.row_bytes > self.max_bytes:
                return None  # grown too large to cache: searched through the store
            vids = _vids(added)
            snap = _append(snap, added, store.vectors(tenant, user_id, vids))
        if snap.dead_rows > _MAX_DEAD * snap.n:
            snap = _compact(snap)
        return dataclasses.replace(snap, state=state)

    # -- the LRU ---------------------------------------------------------------------

    def _get(self, key: tuple[str, str]) -> Snapshot | None:
        with self._lock:
            snap = self._entries.get(key)
            if snap is not None:
                self._entries.move_to_end(key)
            return snap

    def _put(self, key: tuple[str, str], new: Snapshot | None) -> None:
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._bytes -= self._sizes.pop(key)
            if new is None:
                self._loading.pop(key, None)
                return
            self._entries[key] = new
            self._sizes[key] = new.nbytes
            self._bytes += self._sizes[key]
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently searched users until within budget (hold the lock)."""
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            evicted_key, _ = self._entries.popitem(last=False)
            self._bytes -= self._sizes.pop(evicted_key)
            self._loading.pop(evicted_key, None)


def load(
    store: Store,
    tenant: str,
    user_id: str,
    state: UserState,
    row_bytes: int = 0,
    max_bytes: int | None = None,
    column_budget: int = DEFAULT_BUDGET,
) -> Snapshot | None:
    """A user's snapshot read from the store; None if over ``max_bytes``."""
    entries = store.entries(tenant, user_id)
    rows = sum(e.windows for e in entries)
    if max_bytes is not None and rows * row_bytes > max_bytes:
        return None
    # Room to grow by a sixteenth before the first copy.
    spare_entries = len(entries) // 16 + 8
    spare_rows = rows // 16 + 8
    vids = _vids(entries)
    matrix = store.vectors(tenant, user_id, vids, spare=spare_rows, whole_user=True)
    empty = _empty_entries(len(entries) + spare_entries)
    snap = Snapshot(
        state=state,
        m=0,
        **empty,
        metadata=[],
        metadata_bytes=0,
        n=0,
        matrix=matrix,
        scale=np.zeros(len(matrix), dtype=np.float32),
        columns=Columns([], column_budget),
    )
    return _append(snap, entries, matrix, in_place=True)


def _vids(entries: list[Entry]) -> np.ndarray:
    if not entries:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(e.first_vid, e.first_vid + e.windows) for e in entries])


def _empty_entries(capacity: int) -> dict[str, t.Any]:
    return {
        "first_vid": np.zeros(capacity, dtype=np.int64),
        "windows": np.zeros(capacity, dtype=np.int64),
        "row_start": np.zeros(capacity, dtype=np.int64),
        "seqs": np.zeros(capacity, dtype=np.int64),
        "created": np.zeros(capacity, dtype=np.int64),
        "expires": np.zeros(capacity, dtype=np.int64),
        "alive": np.zeros(capacity, dtype=bool),
    }


def _behind(state: UserState, cached: UserState) -> bool:
    """Whether ``state`` is older than ``cached`` (the counters only ever grow)."""
    if state.user_key != cached.user_key:  # user keys are never reused, only grow
        return state.user_key < cached.user_key
    return (
        state.max_vid < cached.max_vid
        or state.deletes < cached.deletes
        or state.updates < cached.updates
        or state.generation < cached.generation
    )


def _append(
    snap: Snapshot, entries: list[Entry], vectors: np.ndarray, in_place: bool = False
) -> Snapshot:
    """``snap`` with these memories and their vectors (in vector-id order) added at the end.

    ``in_place``: ``vectors`` already is ``snap.matrix``, rows from ``snap.n``.
    """
    if not entries:
        return snap
    m, n = snap.m, snap.n
    k = len(entries)
    rows = int(sum(e.windows for e in entries))
    if not in_place and vectors.shape[1] != snap.matrix.shape[1] and n:
        raise ValueError("vector dimension changed without a new generation")
    if m + k > len(snap.seqs):
        capacity = m + k + (m + k) // 4 + 8
        grown: dict[str, t.Any] = {
            name: _grow(getattr(snap, name), m, capacity) for name in _empty_entries(0)
        }
        snap = dataclasses.replace(snap, **grown)
    if not in_place and (n + rows > len(snap.matrix) or snap.matrix.shape[1] != vectors.shape[1]):
        # Growing copies every row, so grow by a quarter at a time.
        capacity = n + rows + (n + rows) // 4 + 8
        snap = dataclasses.replace(
            snap,
            matrix=_grow(snap.matrix, n, capacity, vectors.shape[1]),
            scale=_grow(snap.scale, n, capacity),
        )
    windows = np.array([e.windows for e in entries], dtype=np.int64)
    snap.first_vid[m : m + k] = [e.first_vid for e in entries]
    snap.windows[m : m + k] = windows
    snap.row_start[m : m + k] = n + np.cumsum(windows) - windows
    snap.seqs[m : m + k] = [e.seq for e in entries]
    snap.created[m : m + k] = [e.created_at for e in entries]
    snap.expires[m : m + k] = [e.expires_at or 0 for e in entries]
    snap.alive[m : m + k] = True
    if not in_place:
        snap.matrix[n : n + rows] = vectors[:rows]
    snap.scale[n : n + rows] = _inverse_norms(snap.matrix[n : n + rows])
    added = [e.metadata for e in entries]
    return dataclasses.replace(
        snap,
        m=m + k,
        n=n + rows,
        metadata=snap.metadata + added,
        metadata_bytes=snap.metadata_bytes + _text_bytes(added),
        columns=snap.columns.extended(added),
    )


def _relisted(snap: Snapshot, present: list[Entry]) -> Snapshot:
    """``snap`` with memories no longer present masked, and changed metadata or expiry."""
    m = snap.m
    by_vid = {e.first_vid: e for e in present}
    alive = snap.alive.copy()
    expires = snap.expires.copy()
    metadata = list(snap.metadata)
    matrix = snap.matrix
    changed = False
    for i in range(m):
        entry = by_vid.get(int(snap.first_vid[i]))
        if entry is None:
            if alive[i]:
                alive[i] = False
                # The vectors of a deleted memory do not stay in memory.
                start = int(snap.row_start[i])
                matrix[start : start + int(snap.windows[i])] = 0
            continue
        expires[i] = entry.expires_at or 0
        if metadata[i] != entry.metadata:
            metadata[i] = entry.metadata
            changed = True
    # Deletions alone leave every memory's metadata, and so the columns, as they were.
    columns = Columns(metadata, snap.columns.budget) if changed else snap.columns
    return dataclasses.replace(
        snap,
        alive=alive,
        expires=expires,
        metadata=metadata,
        metadata_bytes=_text_bytes(metadata) if changed else snap.metadata_bytes,
        columns=columns,
    )


def _text_bytes(texts: t.Iterable[str]) -> int:
    """Memory held by metadata texts, roughly: a str object's overhead is ~50 bytes."""
    return sum(len(text) + 50 for text in texts)


def _grow(array: np.ndarray, n: int, capacity: int, width: int | None = None) -> np.ndarray:
    shape: tuple[int, ...] = (capacity,) if array.ndim == 1 else (capacity, width or 0)
    out = np.zeros(shape, dtype=array.dtype)
    if n:
        out[:n] = array[:n]
    return out


def _compact(snap: Snapshot) -> Snapshot:
    keep = np.flatnonzero(snap.alive[: snap.m])
    rows, _ = snap.rows_of(keep)
    windows = snap.windows[keep]
    metadata = [snap.metadata[i] for i in keep]
    return dataclasses.replace(
        snap,
        m=len(keep),
        first_vid=snap.first_vid[keep],
        windows=windows,
        row_start=np.cumsum(windows) - windows,
        seqs=snap.seqs[keep],
        created=snap.created[keep],
        expires=snap.expires[keep],
        alive=np.ones(len(keep), dtype=bool),
        metadata=metadata,
        metadata_bytes=_text_bytes(metadata),
        n=len(rows),
        matrix=np.ascontiguousarray(snap.matrix[rows]),
        scale=snap.scale[rows],
        columns=Columns(metadata, snap.columns.budget),
    )


def _inverse_norms(matrix: np.ndarray) -> np.ndarray:
    if matrix.size == 0:
        return np.zeros(len(matrix), dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
    return np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0).astype(np.float32)
