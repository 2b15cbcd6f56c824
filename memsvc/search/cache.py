"""Users' snapshots kept in a worker's memory, within a budget, coherent with the database.

A search (:func:`memsvc.search.search`) scans a user's matrix with one
matrix-vector product, at memory-bandwidth speed, instead of the store's
KNN, then ranks the candidates exactly like the uncached path.

Each worker process keeps its own view of a user (:class:`~.snapshot.Snapshot`:
the memories' ids, times, metadata and where their vectors are). A small
user's vectors are in the view itself, in the worker's memory; a large
user's are in a snapshot file every worker of the box maps (:mod:`.sharing`).
Small users stay in-process because a file costs a create, a write and two
flushes to disk, and thousands of tiny files, for a copy that costs each
worker little.

Before every search the user's change counters
(:class:`memsvc.store.UserState`, one indexed row, changed in the same
transaction as any write to that user's memories) are read inside the same
read transaction as the search itself (:meth:`SearchCache.current`):

* counters unchanged: the view is current;
* ``max_vid`` grew: new vectors (new memories, or new text), appended;
* ``deletes`` or ``updates`` grew: the user's memories are listed again
  (vector ids, metadata, expiry; no vectors): gone ones are masked out,
  changed metadata and expiry taken over;
* ``generation`` changed (every vector replaced) or ``user_key`` (the user
  was erased and is back): the user is reloaded.

A snapshot file is never stale, only incomplete (see :mod:`.snapshot_file`):
it is keyed by ``(user_key, generation)`` and holds vectors by id, which
within those always mean the same stored vector. So a memory added, changed
or deleted through any process is found, changed or gone in the very next
search everywhere, whichever file any worker published meanwhile.

Memory use is bounded by ``max_bytes`` (what each view holds, counted as
it grows: :attr:`SearchCache.nbytes`): the least recently searched users'
views are dropped first, and a user too large to fit is searched through
the store instead; the snapshot files together are kept within the same
``max_bytes`` (a file is counted once, not once per worker mapping it).
:meth:`SearchCache.prune` (every few seconds per worker) drops views whose
memories changed, sweeps the files, and gives freed memory back.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import logging
import threading
import typing as t

from ..store import UserState
from ..store import VectorSource
from . import building
from . import snapshot_file
from .sharing import DEFAULT_SHARE_MIN_BYTES
from .sharing import PRIVATE_SHARE
from .sharing import Sharing
from .snapshot import Snapshot
from .snapshot_dir import SnapshotDir

log = logging.getLogger(__name__)

#: Masked-out (deleted) rows are compacted away once they are this share.
DEAD_SHARE = 0.25
#: A load that read more than this (metadata and vectors) gives the C heap's free pages back.
TRIM_AFTER = 2**20

_Key = tuple[str, str]


class SearchCache:
    """Users' snapshots in memory, for exact search; bounded to ``max_bytes``.

    ``shared_dir``: the folder of the box's snapshot files (:mod:`.sharing`);
    None keeps every user in this process. ``share_min_bytes``: users whose
    vectors take less stay in this process anyway.
    """

    def __init__(
        self,
        max_bytes: int,
        dimensions: int,
        shared_dir: str | None = None,
        share_min_bytes: int = DEFAULT_SHARE_MIN_BYTES,
    ):
        _map_large_blocks()
        self.max_bytes = max_bytes
        self.dimensions = dimensions
        # What one cached vector costs: its float32 row and scale, at least.
        self.row_bytes = dimensions * 4 + 4
        self.sharing = (
            Sharing(shared_dir, max_bytes, dimensions, share_min_bytes) if shared_dir else None
        )
        self._entries: collections.OrderedDict[_Key, Snapshot] = collections.OrderedDict()
        # What each snapshot was counted as (its filter columns grow as it is searched).
        self._sizes: dict[_Key, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[_Key, threading.Lock] = {}

    @property
    def files(self) -> SnapshotDir | None:
        """The folder of the box's snapshot files; None: every user in this process."""
        return self.sharing.dir if self.sharing is not None else None

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def column_budget(self) -> int:
        """What one user's filter columns may keep: an eighth of the cache."""
        return self.max_bytes // 8

    def current(
        self, source: VectorSource, tenant: str, user_id: str, state: UserState
    ) -> Snapshot | None:
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
            try:
                new = self._refresh(source, key, state, snap)
            except BaseException:
                self._put(key, None)  # half refreshed: read the user afresh next time
                raise
            self._put(key, new)
            if new is not None and new.file is not None and self.sharing is not None:
                self.sharing.touch(new.file.path)
            return new

    def peek(self, tenant: str, user_id: str) -> Snapshot | None:
        """The user's snapshot as it is, without reading the store; None: not cached.

        It may be out of date: check its ``state`` against the store's.
        """
        return self._get((tenant, user_id))

    def settle(self, tenant: str, user_id: str, snap: Snapshot) -> None:
        """Count what a snapshot's filter columns and records take now, evicting others if
        over budget."""
        key = (tenant, user_id)
        with self._lock:
            if self._entries.get(key) is not snap:
                return  # replaced or dropped meanwhile
            size = snap.nbytes
            self._bytes += size - self._sizes[key]
            self._sizes[key] = size
            self._evict()

    def forget(self, tenant: str, user_id: str) -> None:
        """Drop a user's snapshot and file (erased: nothing of theirs is kept)."""
        self._put((tenant, user_id), None)
        if self.sharing is not None:
            self.sharing.forget(tenant, user_id)

    def prune(self, source: VectorSource) -> int:
        """Drop every cached user whose memories changed since cached; returns how many.

        Run now and then (memsvc does, every few seconds per worker), so
        that vectors of deleted memories do not stay in memory for users no
        one searches again. Snapshot files holding vectors of deleted
        memories are rewritten without them, those of erased users (or of
        vectors replaced) removed, with temporary files of writers killed
        half way; views of files replaced or removed are dropped. Then the
        C heap's free pages go back to the system: what searches read and
        let go of (rows, parsed metadata) does not stay in the worker's
        memory, which is then what the cache counts and little more.
        """
        if self.sharing is not None:
            self.sharing.sweep(source)
        with self._lock:
            cached = list(self._entries.items())
        dropped = 0
        with source.read():
            for key, snap in cached:
                if _replaced(snap) or source.user_state(*key) != snap.state:
                    self._put(key, None)
                    dropped += 1
        release_free_memory()
        return dropped

    def users(self) -> int:
        return len(self._entries)

    # -- keeping snapshots current ---------------------------------------------------

    def _refresh(
        self, source: VectorSource, key: _Key, state: UserState, old: Snapshot | None
    ) -> Snapshot | None:
        tenant, user_id = key
        if (
            old is None
            or old.state.user_key != state.user_key
            or old.state.generation != state.generation
            or _replaced(old)
        ):
            # New, or another worker published a file: (re)read the whole user.
            return self._load(source, key, state)
        snap = old
        if state.deletes != old.state.deletes or state.updates != old.state.updates:
            snap = building.relisted(snap, source.entries(tenant, user_id))
        if state.max_vid > old.state.max_vid:
            added = source.entries(tenant, user_id, after_vid=old.state.max_vid)
            if (snap.n + int(added.windows.sum())) * self.row_bytes > self.max_bytes:
                return None  # grown too large to cache: searched through the store
            snap = building.appended(
                snap, added, lambda e: source.vectors(tenant, user_id, e.vids())
            )
        snap = snap.derive(state=state)
        if self._shares(key, snap.n) and (
            snap.file is None
            or snap.n - snap.nb > PRIVATE_SHARE * snap.nb
            or snap.dead_rows > DEAD_SHARE * snap.n
        ):
            assert self.sharing is not None
            published = self.sharing.publish(tenant, user_id, snap)
            if published is not None:
                return published
        if snap.dead_rows > DEAD_SHARE * snap.n and snap.file is None:
            snap = building.compacted(snap)
        return snap

    def _shares(self, key: _Key, rows: int) -> bool:
        return self.sharing is not None and self.sharing.shares(*key, rows)

    def _load(self, source: VectorSource, key: _Key, state: UserState) -> Snapshot | None:
        tenant, user_id = key
        entries = source.entries(tenant, user_id)
        rows = int(entries.windows.sum())
        if rows * self.row_bytes > self.max_bytes:
            return None
        snap = None
        if self._shares(key, rows):
            assert self.sharing is not None
            snap = self.sharing.load(source, tenant, user_id, state, entries, self.column_budget)
        if snap is None:  # a small user, or no file can be written: in this worker
            snap = building.load(source, tenant, user_id, state, entries, self.column_budget)
            if snap.metadata_bytes + rows * self.row_bytes <= TRIM_AFTER:
                return snap
        # The listing and the vectors passed through (PostgreSQL's results, whole; a
        # first file's blocks) go back to the system.
        del entries
        release_free_memory()
        return snap

    # -- the LRU ---------------------------------------------------------------------

    def _get(self, key: _Key) -> Snapshot | None:
        with self._lock:
            snap = self._entries.get(key)
            if snap is not None:
                self._entries.move_to_end(key)
            return snap

    def _put(self, key: _Key, new: Snapshot | None) -> None:
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


def _replaced(snap: Snapshot) -> bool:
    """Whether the file a view maps was replaced or removed since (by another worker)."""
    return snap.file is not None and snapshot_file.inode(snap.file.path) != snap.file.inode


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


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc keeps them, per thread arena).

    Any load lists every memory, and a first load passes the user's vectors
    through a block at a time; without this, the freed buffers would stay
    counted in the worker's private memory.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: glibc's mallopt parameters: the free space at a heap's top from which it is given back,
#: and the size from which a block is a memory map of its own.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Both thresholds: above a search's working arrays, below a large user's.
HEAP_UP_TO = 1 << 20


@functools.cache
def _map_large_blocks() -> None:
    """Blocks of 1 MiB or more (a large user's arrays) each a map of its own, given back the
    moment they are freed; a heap's free top given back past 1 MiB.

    glibc raises both thresholds as large blocks are freed (the map's up to
    32 MiB, the top's to twice that): such blocks then come from the
    thread's arena, and up to twice the largest stays at its top, which
    ``malloc_trim`` never gives back. A worker that loaded a 100,000-memory
    user at 384 dimensions and searched it from four threads held 7 MB more
    than the user's snapshot counts (13 MB, 9% of the matrix, against 8 MB
    with the thresholds fixed).

    Fixed lower, at glibc's first 128 KiB, a search's working arrays (its
    candidates' vectors in float64: 240 KB for 20 at 1536 dimensions) were
    maps of their own, or left a top that was given back: every search
    mapped them again and faulted their pages in, 60 a block, and a small
    user's warm search took 1.3-2x as long. At 1 MiB the next search reuses
    them; a worker holds 7% of that 384-dimension matrix for the user,
    either way (bench.shared_cache).
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, HEAP_UP_TO)
        libc.mallopt(_M_TRIM_THRESHOLD, HEAP_UP_TO)


@functools.cache
def _malloc_trim() -> t.Callable[[int], int] | None:
    try:
        return t.cast(t.Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):
        return None  # not glibc
