"""Users' vectors held in memory as float32 matrices, kept coherent with the database.

A search (:func:`memsvc.search.nearest`) scans a user's matrix with one
matrix-vector product, at memory-bandwidth speed, instead of sqlite-vec's
scalar KNN, then ranks the candidates exactly like the uncached path.

Each worker process holds its own cache. Before every search it reads the
user's change counters (:class:`memsvc.store.UserState`, one indexed row,
changed in the same transaction as any write to that user's memories),
inside the same read transaction as the search itself:

* counters unchanged: the cached matrix is current;
* only ``max_seq`` grew: new memories, appended from the store;
* ``deletes`` grew: the still-present memories are re-listed (seqs only,
  from an index) and the others masked out;
* ``generation`` changed (every vector replaced): the user is reloaded.

So a memory added or deleted through any process is found, or gone, in the
very next search everywhere. Memory use is bounded by ``max_bytes``: the
least recently searched users are dropped first, and a user too large to
fit is searched through the store instead.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading

import numpy as np

from ..store import Store
from ..store import UserState

# Masked-out (deleted) rows are compacted away once they are this share.
_MAX_DEAD = 0.25


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    """One user's vectors as of ``state``; never changed once published.

    Rows ``[:n]`` are valid. Appends may write rows past ``n`` of the same
    arrays and publish a new snapshot with a larger ``n``: readers of this
    one never look past its ``n``.
    """

    state: UserState
    n: int
    seqs: np.ndarray  # int64 [capacity]
    created: np.ndarray  # int64 [capacity]
    matrix: np.ndarray  # float32 [capacity, dims], the stored vectors as they are
    scale: np.ndarray  # float32 [capacity]: 1 / |row|, so that scores are cosines
    alive: np.ndarray | None  # bool [capacity]; None: every row is alive

    @property
    def nbytes(self) -> int:
        arrays = (self.seqs, self.created, self.matrix, self.scale, self.alive)
        return sum(a.nbytes for a in arrays if a is not None)

    @property
    def dead(self) -> int:
        return 0 if self.alive is None else int(self.n - np.count_nonzero(self.alive[: self.n]))

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Float32 cosine of each of rows ``[:n]`` with ``query``; ``-inf`` for deleted rows."""
        n = self.n
        q = np.asarray(query, dtype=np.float32)
        # Embedders return unit vectors, but scale anyway so that scores
        # are cosines whatever was stored.
        scores = (self.matrix[:n] @ q) * self.scale[:n] * np.float32(1 / math.sqrt(q @ q))
        if self.alive is not None:
            scores[~self.alive[:n]] = -np.inf
        return scores


class SearchCache:
    """Users' vectors in memory, for exact search; bounded to ``max_bytes``."""

    def __init__(self, max_bytes: int, dimensions: int):
        self.max_bytes = max_bytes
        # What one cached memory costs: its vector, seq, time, alive flag.
        self.row_bytes = dimensions * 4 + 21
        self._entries: collections.OrderedDict[tuple[str, str], _Snapshot] = (
            collections.OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str], threading.Lock] = {}

    @property
    def nbytes(self) -> int:
        return self._bytes

    def current(
        self, store: Store, tenant: str, user_id: str, state: UserState
    ) -> _Snapshot | None:
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
            self._put(key, snap, new)
            return new

    # -- keeping snapshots current ---------------------------------------------------

    def _refresh(
        self,
        store: Store,
        tenant: str,
        user_id: str,
        state: UserState,
        old: _Snapshot | None,
    ) -> _Snapshot | None:
        if state.count * self.row_bytes > self.max_bytes:
            return None  # too large to cache: searched through the store
        if old is None or old.state.generation != state.generation:
            return self._load(store, tenant, user_id, state)
        alive = old.alive
        if state.deletes != old.state.deletes:
            present = store.user_seqs(tenant, user_id)
            alive = np.zeros(len(old.seqs), dtype=bool)
            alive[: old.n] = np.isin(old.seqs[: old.n], present)
        snap = dataclasses.replace(old, state=state, alive=alive)
        if state.max_seq > old.state.max_seq:
            seqs, created, vectors = store.user_vectors(
                tenant, user_id, after_seq=old.state.max_seq
            )
            snap = _append(snap, seqs, created, vectors)
        if snap.dead > _MAX_DEAD * snap.n:
            snap = _compact(snap)
        return snap

    def _load(self, store: Store, tenant: str, user_id: str, state: UserState) -> _Snapshot | None:
        # Room to grow by a sixteenth before the first copy.
        spare = state.count // 16 + 8
        seqs, created, matrix = store.user_vectors(tenant, user_id, spare=spare)
        n = len(seqs) - spare
        scale = np.zeros(len(seqs), dtype=np.float32)
        scale[:n] = _inverse_norms(matrix[:n])
        return _Snapshot(state, n, seqs, created, matrix, scale, None)

    # -- the LRU ---------------------------------------------------------------------

    def _get(self, key: tuple[str, str]) -> _Snapshot | None:
        with self._lock:
            snap = self._entries.get(key)
            if snap is not None:
                self._entries.move_to_end(key)
            return snap

    def _put(self, key: tuple[str, str], old: _Snapshot | None, new: _Snapshot | None) -> None:
        with self._lock:
            current = self._entries.pop(key, None)
            if current is not None:
                self._bytes -= current.nbytes
            if new is None:
                self._loading.pop(key, None)
                return
            self._entries[key] = new
            self._bytes += new.nbytes
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                evicted_key, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes
                self._loading.pop(evicted_key, None)


def _behind(state: UserState, cached: UserState) -> bool:
    """Whether ``state`` is older than ``cached`` (the counters only ever grow)."""
    return (
        state.max_seq < cached.max_seq
        or state.deletes < cached.deletes
        or state.generation < cached.generation
    )


def _append(
    snap: _Snapshot, seqs: np.ndarray, created: np.ndarray, vectors: np.ndarray
) -> _Snapshot:
    m = len(seqs)
    if m == 0:
        return snap
    n = snap.n
    if snap.matrix.shape[1] != vectors.shape[1] and n:
        raise ValueError("vector dimension changed without a new generation")
    if n + m > len(snap.seqs) or snap.matrix.shape[1] != vectors.shape[1]:
        # Growing copies every row, so grow by a quarter at a time.
        capacity = n + m + (n + m) // 4 + 8
        grown = _Snapshot(
            snap.state,
            n,
            _grow(snap.seqs, n, capacity),
            _grow(snap.created, n, capacity),
            _grow(snap.matrix, n, capacity, vectors.shape[1]),
            _grow(snap.scale, n, capacity),
            None if snap.alive is None else _grow(snap.alive, n, capacity),
        )
        snap = grown
    snap.seqs[n : n + m] = seqs
    snap.created[n : n + m] = created
    snap.matrix[n : n + m] = vectors
    snap.scale[n : n + m] = _inverse_norms(vectors)
    if snap.alive is not None:
        snap.alive[n : n + m] = True
    return dataclasses.replace(snap, n=n + m)


def _grow(array: np.ndarray, n: int, capacity: int, width: int | None = None) -> np.ndarray:
    shape: tuple[int, ...] = (capacity,) if array.ndim == 1 else (capacity, width or 0)
    out = np.zeros(shape, dtype=array.dtype)
    if n:
        out[:n] = array[:n]
    return out


def _compact(snap: _Snapshot) -> _Snapshot:
    assert snap.alive is not None
    keep = np.flatnonzero(snap.alive[: snap.n])
    return _Snapshot(
        snap.state,
        len(keep),
        snap.seqs[keep],
        snap.created[keep],
        np.ascontiguousarray(snap.matrix[keep]),
        snap.scale[keep],
        None,
    )


def _inverse_norms(matrix: np.ndarray) -> np.ndarray:
    if matrix.size == 0:
        return np.zeros(len(matrix), dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
    return np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0).astype(np.float32)
