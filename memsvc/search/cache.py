"""Users' vectors held in memory as float32 matrices, kept coherent with the database.

A search (:func:`memsvc.search.nearest`) scans a user's matrix with one
matrix-vector product, at memory-bandwidth speed, instead of sqlite-vec's
scalar KNN, then ranks the candidates exactly like the uncached path.

Each worker process keeps its own view of a user (:class:`Snapshot`: the
memories' ids, times, metadata and where their vectors are). A small user's
vectors are in the view itself, in the worker's memory. A large user's
(at least ``share_min_bytes``) are in a snapshot file (:mod:`.shared`)
that every worker of the box maps read-only: the box holds one copy, in the
page cache, whatever the number of workers; a view then holds privately only
the vectors the file lacks (written since it was published), and publishes
a new file once those are a sixteenth of the file. The worker that finds no
file writes the first one straight from the store, a block at a time
(:meth:`memsvc.store.VectorSource.vector_blocks`): no worker ever holds the whole
matrix, not even while loading it. Small users stay
in-process because a file costs a create, a write and two flushes to disk,
and thousands of tiny files, for a copy that costs each worker little.

Before every search the user's change counters (:class:`memsvc.store.UserState`,
one indexed row, changed in the same transaction as any write to that user's
memories) are read inside the same read transaction as the search itself:

* counters unchanged: the view is current;
* ``max_vid`` grew: new vectors (new memories, or new text), appended;
* ``deletes`` or ``updates`` grew: the user's memories are listed again
  (vector ids, metadata, expiry; no vectors): gone ones are masked out,
  changed metadata and expiry taken over;
* ``generation`` changed (every vector replaced) or ``user_key`` (the user
  was erased and is back): the user is reloaded.

A snapshot file is never stale, only incomplete (see :mod:`.shared`): it is
keyed by ``(user_key, generation)`` and holds vectors by id, which within
those always mean the same stored vector. So a memory added, changed or
deleted through any process is found, changed or gone in the very next
search everywhere, whichever file any worker published meanwhile.

Memory use is bounded by ``max_bytes``: the least recently searched users'
views are dropped first, and a user too large to fit is searched through
the store instead; the snapshot files together are kept within the same
``max_bytes`` (a file is counted once, not once per worker mapping it).
Rows of deleted memories are zeroed in a view when they are masked; a file
is never written to, so :meth:`SearchCache.prune` (every few seconds per
worker) rewrites without them, or removes, the files holding vectors of
deleted memories or erased users, and drops views whose memories changed.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import fcntl
import functools
import logging
import math
import os
import sys
import threading
import time
import typing as t

import numpy as np

from ..models import Memory
from ..store import Entries
from ..store import Entry
from ..store import UserState
from ..store import VectorSource
from . import shared
from .columns import DEFAULT_BUDGET
from .columns import Columns

log = logging.getLogger(__name__)

# Masked-out (deleted) rows are compacted away once they are this share.
_MAX_DEAD = 0.25
#: A user whose vectors take at least this much is kept in a snapshot file
#: shared by the box's workers (when the cache has a folder for them).
DEFAULT_SHARE_MIN_BYTES = 4 * 2**20
# A view publishes a new file once the vectors it holds privately are this
# share of the file's (or the user's rows dead in it are _MAX_DEAD).
_MAX_PRIVATE = 1 / 16
# A load that read more than this (metadata and vectors) gives the C heap's free pages back.
_TRIM_AFTER = 2**20


class Records:
    """Memories a snapshot's searches answered with, read as of its state, by seq.

    The user's counters unchanged, none of their memories changed: a
    search that finds them unchanged answers with these instead of reading
    the same rows again. Bounded; a new state starts a new snapshot, and
    with it an empty set. A memory whose metadata has more than
    :data:`MAX_NODES` values is not kept (read again when answered): what
    one holds is counted by walking it, and the walk is bounded.
    """

    MAX_MEMORIES = 1024
    MAX_BYTES = 2**20
    MAX_NODES = 512

    __slots__ = ("found", "nbytes")

    def __init__(self) -> None:
        self.found: dict[int, Memory] = {}
        self.nbytes = 0

    def add(self, found: t.Mapping[int, Memory]) -> bool:
        """Keep these (read as of the snapshot's state) while there is room; whether any was."""
        kept = False
        for seq, memory in found.items():
            if len(self.found) >= self.MAX_MEMORIES or self.nbytes >= self.MAX_BYTES:
                break
            if seq not in self.found:
                size = record_bytes(memory, self.MAX_NODES)
                if size is None:
                    continue
                self.found[seq] = memory
                self.nbytes += size
                kept = True
        return kept


#: What a memory the API answered keeps beside it: its JSON text's entry in
#: :mod:`memsvc.wire`'s table (a weak reference, its callback, a tuple, a slot).
_ANSWERED_BYTES = 300


def record_bytes(memory: Memory, max_nodes: int) -> int | None:
    """What a kept memory holds: its object and strings, its metadata's objects, and the JSON
    text of it the API keeps while it lives; None if its metadata has over ``max_nodes`` values."""
    metadata = held_bytes(memory.metadata, max_nodes)
    if metadata is None:
        return None
    held, text = metadata
    strings = (memory.id, memory.tenant, memory.user_id, memory.content)
    # Its JSON text: the content, the metadata, and about 250 bytes of ids and times.
    answer = sys.getsizeof("") + len(memory.content) + text + 250
    return (
        sys.getsizeof(memory) + sum(sys.getsizeof(s) for s in strings) + held + answer
        + _ANSWERED_BYTES
    )  # fmt: skip


def held_bytes(value: t.Any, max_nodes: int) -> tuple[int, int] | None:
    """What a parsed JSON value holds (its objects) and about how long its JSON text is;
    None if it has more than ``max_nodes`` values."""
    held = text = 0
    stack = [value]
    nodes = 0
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return None
        if isinstance(node, dict):
            held += sys.getsizeof(node)
            text += 2 + len(node)
            for key, item in node.items():
                held += sys.getsizeof(key)
                text += len(key) + 3
                stack.append(item)
        elif isinstance(node, list):
            held += sys.getsizeof(node)
            text += 2 + len(node)
            stack.extend(node)
        elif isinstance(node, str):
            held += sys.getsizeof(node)
            text += len(node) + 2
        elif node is None or isinstance(node, bool):
            text += 5
        else:  # a number
            held += sys.getsizeof(node)
            text += 12
    return held, text


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One user's memories and vectors as of ``state``; never changed once published.

    Entries (memories) ``[:m]`` and rows ``[:n]`` are valid; entry ``i``
    owns rows ``row_start[i] .. row_start[i] + windows[i] - 1``. Rows
    ``[:nb]`` are the snapshot ``file``'s (none without one), rows
    ``nb .. n - 1`` are ``matrix[: n - nb]``, held privately. A file may
    hold rows no entry owns (memories since deleted, or added after
    ``state``). Appends may write past ``m`` and ``n`` of the same arrays and
    publish a new snapshot: readers of this one never look past its ``m``
    and ``n``.
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
    matrix: np.ndarray  # float32 [cap, dims], the stored vectors as they are (private rows)
    scale: np.ndarray  # float32 [cap]: 1 / |row|, so that scores are cosines
    columns: Columns
    file: shared.SnapshotFile | None = None
    #: Memories searches answered with (never carried over to a new state).
    records: Records = dataclasses.field(default_factory=Records, init=False, compare=False)

    @property
    def nb(self) -> int:
        """Rows in the shared file."""
        return self.file.header.rows if self.file is not None else 0

    @property
    def private_bytes(self) -> int:
        """What this view holds in this worker's own memory."""
        arrays = (
            self.first_vid, self.windows, self.row_start, self.seqs, self.created,
            self.expires, self.alive, self.matrix, self.scale,
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


class SearchCache:
    """Users' vectors in memory, for exact search; bounded to ``max_bytes``.

    ``shared_dir``: the folder of the box's snapshot files (:mod:`.shared`);
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
        self.max_bytes = max_bytes
        self.dimensions = dimensions
        # What one cached vector costs: its float32 row and scale, at least.
        self.row_bytes = dimensions * 4 + 4
        self.share_min_bytes = share_min_bytes
        self.files = shared.SnapshotDir(shared_dir, max_bytes) if shared_dir else None
        self._entries: collections.OrderedDict[tuple[str, str], Snapshot] = (
            collections.OrderedDict()
        )
        # What each snapshot was counted as (its filter columns grow as it is searched).
        self._sizes: dict[tuple[str, str], int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str], threading.Lock] = {}
        # Files found holding no deleted memory's vector, by (path, inode): their deletes.
        self._checked: dict[tuple[str, tuple[int, int]], int] = {}
        self._touched: dict[str, float] = {}
        self._write_failed = False

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def column_budget(self) -> int:
        """What one user's filter columns may keep: an eighth of the cache."""
        return self.max_bytes // 8

    def current(
        self, store: VectorSource, tenant: str, user_id: str, state: UserState
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
            new = self._refresh(store, tenant, user_id, state, snap)
            self._put(key, new)
            if new is not None and new.file is not None:
                self._touch(new.file.path)
            return new

    def peek(self, tenant: str, user_id: str) -> Snapshot | None:
        """The user's snapshot as it is, without reading the store; None: not cached.

        It may be out of date: check its ``state`` against the store's.
        """
        return self._get((tenant, user_id))

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
        """Drop a user's snapshot and file (erased: nothing of theirs is kept)."""
        self._put((tenant, user_id), None)
        if self.files is not None and shared.fits(tenant, user_id):
            self.files.remove(self.files.file_of(tenant, user_id))

    def prune(self, store: VectorSource) -> int:
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
        if self.files is not None:
            self._sweep(store)
        with self._lock:
            cached = [(key, snap) for key, snap in self._entries.items()]
        dropped = 0
        with store.read():
            for key, snap in cached:
                gone = snap.file is not None and shared.inode(snap.file.path) != snap.file.inode
                if gone or store.user_state(*key) != snap.state:
                    self._put(key, None)
                    dropped += 1
        _release_free_memory()
        return dropped

    def users(self) -> int:
        return len(self._entries)

    # -- keeping snapshots current ---------------------------------------------------

    def _refresh(
        self,
        store: VectorSource,
        tenant: str,
        user_id: str,
        state: UserState,
        old: Snapshot | None,
    ) -> Snapshot | None:
        if (
            old is None
            or old.state.user_key != state.user_key
            or old.state.generation != state.generation
            or (old.file is not None and shared.inode(old.file.path) != old.file.inode)
        ):
            # New, or another worker published a file: (re)read the whole user.
            return self._load(store, tenant, user_id, state)
        snap = old
        if state.deletes != old.state.deletes or state.updates != old.state.updates:
            snap = _relisted(snap, store.entries(tenant, user_id))
        if state.max_vid > old.state.max_vid:
            added = store.entries(tenant, user_id, after_vid=old.state.max_vid)
            if (snap.n + sum(e.windows for e in added)) * self.row_bytes > self.max_bytes:
                return None  # grown too large to cache: searched through the store
            snap = _append(snap, added, lambda vids: store.vectors(tenant, user_id, vids))
        snap = dataclasses.replace(snap, state=state)
        if self._shares(tenant, user_id, snap.n) and (
            snap.file is None
            or snap.n - snap.nb > _MAX_PRIVATE * snap.nb
            or snap.dead_rows > _MAX_DEAD * snap.n
        ):
            published = self._publish(tenant, user_id, snap)
            if published is not None:
                return published
        if snap.dead_rows > _MAX_DEAD * snap.n and snap.file is None:
            snap = _compact(snap)
        return snap

    def _shares(self, tenant: str, user_id: str, rows: int) -> bool:
        return (
            self.files is not None
            and not self._write_failed
            and rows * self.row_bytes >= self.share_min_bytes
            and shared.fits(tenant, user_id)
        )

    def _load(
        self, store: VectorSource, tenant: str, user_id: str, state: UserState
    ) -> Snapshot | None:
        entries = store.entries(tenant, user_id)
        rows = sum(e.windows for e in entries)
        if rows * self.row_bytes > self.max_bytes:
            return None
        if not self._shares(tenant, user_id, rows):
            snap = load(store, tenant, user_id, state, self.row_bytes, None, self.column_budget,
                        entries=entries)  # fmt: skip
            if snap is not None and snap.metadata_bytes + rows * self.row_bytes > _TRIM_AFTER:
                # The listing's buffers (PostgreSQL's result, whole) go back to the system.
                del entries
                _release_free_memory()
            return snap
        assert self.files is not None
        path = self.files.file_of(tenant, user_id)
        snap = self._attach(store, tenant, user_id, state, entries, path)
        if snap is not None:
            del entries
            _release_free_memory()
            return snap
        # One worker reads and publishes; another loading the user meanwhile
        # waits, then maps what it published.
        with self.files.writing(path):
            snap = self._attach(store, tenant, user_id, state, entries, path)
            if snap is None:
                snap = self._first_file(store, tenant, user_id, state, entries, path)
        if snap is None:  # no file can be written: the user stays in this worker
            snap = load(store, tenant, user_id, state, self.row_bytes, None, self.column_budget,
                        entries=entries)  # fmt: skip
        del entries
        _release_free_memory()
        return snap

    def _first_file(
        self,
        store: VectorSource,
        tenant: str,
        user_id: str,
        state: UserState,
        entries: Entries | list[Entry],
        path: str,
    ) -> Snapshot | None:
        """Write the user's file straight from the store and map it; None if it cannot be.

        The vectors go from the store to the file a block at a time
        (:meth:`VectorSource.vector_blocks`): this worker never holds the user's
        matrix, only a block or two of it (8 MB each).
        """
        assert self.files is not None
        try:
            self.files.make()
        except OSError as e:
            self._cannot_write(path, e)
            return None
        vids = _vids(entries)
        header = shared.Header(
            tenant, user_id, state.user_key, state.generation, state.deletes, len(vids),
            self.dimensions,
        )  # fmt: skip
        blocks = store.vector_blocks(tenant, user_id, vids)
        try:
            shared.write_blocks(
                path, header, vids, ((at, rows, _inverse_norms(rows)) for at, rows in blocks)
            )
        except (OSError, ValueError) as e:
            # Read to the end all the same: a read cut short would be
            # cancelled, and with it the read transaction (PostgreSQL).
            for _ in blocks:
                pass
            if isinstance(e, OSError):
                self._cannot_write(path, e)
            else:  # vectors of another size (an earlier model's): not this cache's
                log.info("search cache: not writing %s (%s)", path, e)
            return None
        self.files.fit(keep=path)
        found = shared.open_file(path, tenant, user_id, self.dimensions)
        if found is None:
            return None  # removed at once (erased meanwhile)
        return _assemble(
            state, entries, found, lambda vids: store.vectors(tenant, user_id, vids),
            self.column_budget,
        )  # fmt: skip

    def _cannot_write(self, path: str, error: OSError) -> None:
        """No more files from this worker: its users stay in its memory."""
        if not self._write_failed:
            log.warning("search cache: cannot write %s (%s); keeping vectors per worker",
                        path, error)  # fmt: skip
        self._write_failed = True

    def _attach(
        self,
        store: VectorSource,
        tenant: str,
        user_id: str,
        state: UserState,
        entries: Entries | list[Entry],
        path: str,
    ) -> Snapshot | None:
        """A view over the user's published file, if there is a usable one."""
        found = shared.open_file(path, tenant, user_id, self.dimensions)
        if found is None or (found.header.user_key, found.header.generation) != (
            state.user_key,
            state.generation,
        ):
            return None
        snap = _assemble(
            state, entries, found, lambda vids: store.vectors(tenant, user_id, vids),
            self.column_budget,
        )  # fmt: skip
        if snap.n - snap.nb > _MAX_PRIVATE * snap.nb:
            return None  # most of it is missing: publish anew
        return snap

    def _publish(self, tenant: str, user_id: str, snap: Snapshot) -> Snapshot | None:
        """Write the live rows of ``snap`` as the user's file; the view over it, or None."""
        assert self.files is not None
        path = self.files.file_of(tenant, user_id)
        live = np.flatnonzero(snap.alive[: snap.m])
        rows, owner = snap.rows_of(live)
        vids = snap.first_vid[live][owner] + (rows - snap.row_start[live][owner])
        order = np.argsort(vids, kind="stable")
        rows, vids = rows[order], vids[order]
        header = shared.Header(
            tenant, user_id, snap.state.user_key, snap.state.generation, snap.state.deletes,
            len(rows), snap.dims,
        )  # fmt: skip
        try:
            self.files.make()
            shared.write_file(
                path, header, vids, snap.take_scale(rows), lambda a, b: snap.take(rows[a:b])
            )
        except OSError as e:
            self._cannot_write(path, e)
            return None
        self.files.fit(keep=path)
        found = shared.open_file(path, tenant, user_id, self.dimensions)
        if found is None:
            return None  # removed at once (over the budget, or erased meanwhile)
        return _rebased(snap, found)

    def _touch(self, path: str) -> None:
        """Mark a file used, at most every few seconds (least recently used files go first)."""
        now = _monotonic()
        if now - self._touched.get(path, -math.inf) > 5:
            self._touched[path] = now
            assert self.files is not None
            self.files.touch(path)

    def _sweep(self, store: VectorSource) -> None:
        """One worker at a time: no file keeps what was erased; temporary leftovers go."""
        assert self.files is not None
        with _exclusive(self.files.path) as mine:
            if not mine:
                return  # another worker is at it
            self.files.sweep_temporary()
            for path in self.files.files():
                self._sweep_file(store, path)
            self.files.fit()

    def _sweep_file(self, store: VectorSource, path: str) -> None:
        assert self.files is not None
        checked = shared.read_header(path)
        if checked is None:
            self.files.remove(path)  # not a file this memsvc can read
            return
        header, _ = checked
        ino = shared.inode(path)
        with store.read():
            state = store.user_state(header.tenant, header.user_id)
            if (
                state is None
                or state.user_key != header.user_key
                or state.generation != header.generation
                or header.dims != self.dimensions
            ):
                self.files.remove(path)  # erased, or every vector replaced
                return
            if state.deletes == header.deletes or (
                ino is not None and self._checked.get((path, ino)) == state.deletes
            ):
                return  # nothing deleted since the file's rows were listed
            entries = store.entries(header.tenant, header.user_id)
        found = shared.open_file(path, header.tenant, header.user_id, self.dimensions)
        if found is None:
            return
        keep = np.isin(found.vids, _vids(entries))
        if keep.all():
            self._checked[(path, found.inode)] = state.deletes
            return
        rows = np.flatnonzero(keep)
        compacted = shared.Header(
            header.tenant, header.user_id, header.user_key, header.generation, state.deletes,
            len(rows), header.dims,
        )  # fmt: skip
        try:
            shared.write_file(
                path, compacted, found.vids[rows], found.scale[rows],
                lambda a, b: found.matrix[rows[a:b]],
            )  # fmt: skip
        except OSError:
            self.files.remove(path)  # a file that cannot be rewritten must not keep them
        log.info("search cache: rewrote %s without %d deleted vectors", path, len(keep) - len(rows))

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


def _release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc keeps them, per thread arena).

    Any load lists every memory, and a first load passes the user's vectors
    through a block at a time; without this, the freed buffers would stay
    counted in the worker's private memory.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> t.Callable[[int], int] | None:
    try:
        return t.cast(t.Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):
        return None  # not glibc


def _monotonic() -> float:
    return time.monotonic()


@contextlib.contextmanager
def _exclusive(folder: str) -> t.Iterator[bool]:
    """Whether this process holds the folder's sweep lock (never waits for it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # lets go of the lock


def load(
    store: VectorSource,
    tenant: str,
    user_id: str,
    state: UserState,
    row_bytes: int = 0,
    max_bytes: int | None = None,
    column_budget: int = DEFAULT_BUDGET,
    entries: Entries | None = None,
) -> Snapshot | None:
    """A user's snapshot read from the store, all in this process; None if over ``max_bytes``."""
    if entries is None:
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


def _assemble(
    state: UserState,
    entries: Entries | list[Entry],
    file: shared.SnapshotFile,
    vectors_of: t.Callable[[np.ndarray], np.ndarray],
    column_budget: int,
) -> Snapshot:
    """A view of these memories over ``file``; vectors it lacks from ``vectors_of``."""
    dims = file.header.dims
    empty = _empty_entries(len(entries) + len(entries) // 16 + 8)
    snap = Snapshot(
        state=state,
        m=0,
        **empty,
        metadata=[],
        metadata_bytes=0,
        n=file.header.rows,
        matrix=np.zeros((0, dims), dtype=np.float32),
        scale=np.zeros(0, dtype=np.float32),
        columns=Columns([], column_budget),
        file=file,
    )
    return _append(snap, entries, vectors_of)


def _rebased(snap: Snapshot, file: shared.SnapshotFile) -> Snapshot:
    """``snap``'s live memories over ``file``: rows it lacks copied from ``snap``."""
    keep = np.flatnonzero(snap.alive[: snap.m])
    entries = [
        Entry(int(snap.seqs[i]), int(snap.first_vid[i]), int(snap.windows[i]),
              int(snap.created[i]), int(snap.expires[i]) or None, snap.metadata[i])
        for i in keep
    ]  # fmt: skip
    by_vid = {int(snap.first_vid[i]): int(i) for i in keep}

    def vectors_of(vids: np.ndarray) -> np.ndarray:
        # Whole memories, in order: each first vid starts a run of its windows.
        out = []
        at = 0
        while at < len(vids):
            i = by_vid[int(vids[at])]
            w = int(snap.windows[i])
            start = int(snap.row_start[i])
            out.append(snap.take(np.arange(start, start + w)))
            at += w
        return np.concatenate(out) if out else np.zeros((0, snap.dims), dtype=np.float32)

    return _assemble(snap.state, entries, file, vectors_of, snap.columns.budget)


def _vids(entries: Entries | list[Entry]) -> np.ndarray:
    """The vector ids of these memories, each memory's windows in turn.

    Without an array per memory: for 100,000 memories those took 95 ms
    (this takes 9), and left 8 MB of freed scraps in the thread's arena.
    """
    first = np.fromiter((e.first_vid for e in entries), dtype=np.int64, count=len(entries))
    windows = np.fromiter((e.windows for e in entries), dtype=np.int64, count=len(entries))
    if bool((windows == 1).all()):  # one window each (most users)
        return first
    total = int(windows.sum())
    return np.repeat(first - (np.cumsum(windows) - windows), windows) + np.arange(total)


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
    snap: Snapshot,
    entries: Entries | list[Entry],
    vectors: np.ndarray | t.Callable[[np.ndarray], np.ndarray],
    in_place: bool = False,
) -> Snapshot:
    """``snap`` with these memories (in vector-id order) added at the end.

    Their vectors are the file's where it holds them; the others are
    ``vectors`` (in vector-id order), or what ``vectors(vids)`` returns for
    their ids. ``in_place``: ``vectors`` already is ``snap.matrix``, rows
    from ``snap.n`` (no file).
    """
    if not entries:
        return snap
    m, n, nb = snap.m, snap.n, snap.nb
    k = len(entries)
    if m + k > len(snap.seqs):
        capacity = m + k + (m + k) // 4 + 8
        grown: dict[str, t.Any] = {
            name: _grow(getattr(snap, name), m, capacity) for name in _empty_entries(0)
        }
        snap = dataclasses.replace(snap, **grown)
    windows = np.array([e.windows for e in entries], dtype=np.int64)
    first = np.array([e.first_vid for e in entries], dtype=np.int64)
    if snap.file is not None:
        start = snap.file.rows_of(first)
        whole = (start >= 0) & (snap.file.rows_of(first + windows - 1) == start + windows - 1)
        start[~whole] = -1
    else:
        start = np.full(k, -1, dtype=np.int64)
    missing = start < 0
    rows = int(windows[missing].sum())
    if rows:
        if not in_place:
            if callable(vectors):
                got = vectors(_vids([e for e, miss in zip(entries, missing, strict=True) if miss]))
            else:
                got = vectors
            if n - nb and got.shape[1] != snap.matrix.shape[1]:
                raise ValueError("vector dimension changed without a new generation")
            if n - nb + rows > len(snap.matrix) or snap.matrix.shape[1] != got.shape[1]:
                # Growing copies every row, so grow by a quarter at a time.
                capacity = n - nb + rows + (n - nb + rows) // 4 + 8
                snap = dataclasses.replace(
                    snap,
                    matrix=_grow(snap.matrix, n - nb, capacity, got.shape[1]),
                    scale=_grow(snap.scale, n - nb, capacity),
                )
            snap.matrix[n - nb : n - nb + rows] = got[:rows]
        held = snap.matrix[n - nb : n - nb + rows]
        snap.scale[n - nb : n - nb + rows] = _inverse_norms(held)
        start[missing] = n + np.cumsum(windows[missing]) - windows[missing]
    snap.first_vid[m : m + k] = first
    snap.windows[m : m + k] = windows
    snap.row_start[m : m + k] = start
    snap.seqs[m : m + k] = [e.seq for e in entries]
    snap.created[m : m + k] = [e.created_at for e in entries]
    snap.expires[m : m + k] = [e.expires_at or 0 for e in entries]
    snap.alive[m : m + k] = True
    # One text for equal metadata (most memories have none, or the same few):
    # each str is ~50 bytes of the worker's own memory on top of its text.
    same: dict[str, str] = {}
    added = [same.setdefault(e.metadata, e.metadata) for e in entries]
    return dataclasses.replace(
        snap,
        m=m + k,
        n=n + rows,
        metadata=snap.metadata + added,
        metadata_bytes=snap.metadata_bytes + _text_bytes(added),
        columns=snap.columns.extended(added),
    )


def _relisted(snap: Snapshot, present: Entries) -> Snapshot:
    """``snap`` with memories no longer present masked, and changed metadata or expiry."""
    m, nb = snap.m, snap.nb
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
                # The vectors of a deleted memory do not stay in this worker's
                # memory (a file's are rewritten by prune).
                start = int(snap.row_start[i])
                if start >= nb:
                    matrix[start - nb : start - nb + int(snap.windows[i])] = 0
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
    """Memory held by metadata texts: each distinct object once, and a slot in two lists (the
    snapshot's and its columns')."""
    distinct: dict[int, str] = {}
    slots = 0
    for text in texts:
        distinct[id(text)] = text
        slots += 1
    return sum(sys.getsizeof(text) for text in distinct.values()) + 16 * slots


def _grow(array: np.ndarray, n: int, capacity: int, width: int | None = None) -> np.ndarray:
    shape: tuple[int, ...] = (capacity,) if array.ndim == 1 else (capacity, width or 0)
    out = np.zeros(shape, dtype=array.dtype)
    if n:
        out[:n] = array[:n]
    return out


def _compact(snap: Snapshot) -> Snapshot:
    """``snap`` without its deleted memories (all in this process: no file)."""
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
