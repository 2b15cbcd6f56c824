"""A large user's snapshot over a file every worker of the box maps: :class:`Sharing`.

A user whose vectors take at least ``share_min_bytes`` is kept in a
snapshot file (:mod:`.snapshot_file`, in the folder of :mod:`.snapshot_dir`):
the box holds one copy, in the page cache, whatever the number of workers;
a worker's view holds privately only the vectors the file lacks (written
since it was published). Loading such a user, a worker maps the file a
worker published (:meth:`Sharing.attach`), or if there is none writes the
first one straight from the store, a block at a time
(:meth:`Sharing.first_file`): no worker ever holds the whole matrix, not
even while loading it; another worker loading the same user meanwhile
waits for it, then maps what it published. A view publishes a new file once
the vectors it holds privately are a sixteenth of the file's
(:meth:`Sharing.publish`). A file is never written to: :meth:`Sharing.sweep`
(the workers' maintenance, one at a time) rewrites without them the files
holding vectors of deleted memories, and removes those of erased users.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import time
import typing as t

import numpy as np

from ..store import Entries
from ..store import UserState
from ..store import VectorSource
from . import building
from . import snapshot_file
from .snapshot import Snapshot
from .snapshot_dir import SnapshotDir

log = logging.getLogger(__name__)

#: A user whose vectors take at least this much is kept in a snapshot file
#: shared by the box's workers (when the cache has a folder for them).
DEFAULT_SHARE_MIN_BYTES = 4 * 2**20
#: A view publishes a new file once the vectors it holds privately are this
#: share of the file's (or the user's rows dead in it are DEAD_SHARE).
PRIVATE_SHARE = 1 / 16


class Sharing:
    """Which users a cache keeps in files, and the files' lives: attach, write, publish, sweep."""

    def __init__(self, folder: str, max_bytes: int, dimensions: int, share_min_bytes: int):
        self.dir = SnapshotDir(folder, max_bytes)
        self.dimensions = dimensions
        self.row_bytes = dimensions * 4 + 4
        self.share_min_bytes = share_min_bytes
        self.write_failed = False
        # Files found holding no deleted memory's vector, by (path, inode): their deletes.
        self._checked: dict[tuple[str, tuple[int, int]], int] = {}
        self._touched: dict[str, float] = {}

    def shares(self, tenant: str, user_id: str, rows: int) -> bool:
        """Whether a user of ``rows`` vectors is kept in a file."""
        return (
            not self.write_failed
            and rows * self.row_bytes >= self.share_min_bytes
            and snapshot_file.fits(tenant, user_id)
        )

    def load(
        self,
        source: VectorSource,
        tenant: str,
        user_id: str,
        state: UserState,
        entries: Entries,
        column_budget: int,
    ) -> Snapshot | None:
        """The user's view over their file: mapped, or first written; None if none can be."""
        path = self.dir.file_of(tenant, user_id)
        snap = self.attach(source, tenant, user_id, state, entries, column_budget)
        if snap is not None:
            return snap
        # One worker reads and publishes; another loading the user meanwhile
        # waits, then maps what it published.
        with self.dir.writing(path):
            snap = self.attach(source, tenant, user_id, state, entries, column_budget)
            if snap is None:
                snap = self.first_file(source, tenant, user_id, state, entries, column_budget)
        return snap

    def attach(
        self,
        source: VectorSource,
        tenant: str,
        user_id: str,
        state: UserState,
        entries: Entries,
        column_budget: int,
    ) -> Snapshot | None:
        """A view over the user's published file, if there is a usable one."""
        path = self.dir.file_of(tenant, user_id)
        found = snapshot_file.open_file(path, tenant, user_id, self.dimensions)
        if found is None or (found.header.user_key, found.header.generation) != (
            state.user_key,
            state.generation,
        ):
            return None
        snap = building.assemble(
            state, entries, found, lambda e: source.vectors(tenant, user_id, e.vids()),
            column_budget,
        )  # fmt: skip
        if snap.n - snap.nb > PRIVATE_SHARE * snap.nb:
            return None  # most of it is missing: publish anew
        return snap

    def first_file(
        self,
        source: VectorSource,
        tenant: str,
        user_id: str,
        state: UserState,
        entries: Entries,
        column_budget: int,
    ) -> Snapshot | None:
        """Write the user's file straight from the store and map it; None if it cannot be.

        The vectors go from the store to the file a block at a time
        (:meth:`~memsvc.store.VectorSource.vector_blocks`): this worker never
        holds the user's matrix, only a block or two of it (8 MB each).
        """
        path = self.dir.file_of(tenant, user_id)
        try:
            self.dir.make()
        except OSError as e:
            self._cannot_write(path, e)
            return None
        vids = entries.vids()
        header = snapshot_file.Header(
            tenant, user_id, state.user_key, state.generation, state.deletes, len(vids),
            self.dimensions,
        )  # fmt: skip
        blocks = source.vector_blocks(tenant, user_id, vids)
        try:
            snapshot_file.write_blocks(
                path,
                header,
                vids,
                ((at, rows, building.inverse_norms(rows)) for at, rows in blocks),
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
        self.dir.fit(keep=path)
        found = snapshot_file.open_file(path, tenant, user_id, self.dimensions)
        if found is None:
            return None  # removed at once (erased meanwhile)
        return building.assemble(
            state, entries, found, lambda e: source.vectors(tenant, user_id, e.vids()),
            column_budget,
        )  # fmt: skip

    def publish(self, tenant: str, user_id: str, snap: Snapshot) -> Snapshot | None:
        """Write the live rows of ``snap`` as the user's file; the view over it, or None."""
        path = self.dir.file_of(tenant, user_id)
        live = np.flatnonzero(snap.alive[: snap.m])
        rows, owner = snap.rows_of(live)
        vids = snap.first_vid[live][owner] + (rows - snap.row_start[live][owner])
        order = np.argsort(vids, kind="stable")
        rows, vids = rows[order], vids[order]
        header = snapshot_file.Header(
            tenant, user_id, snap.state.user_key, snap.state.generation, snap.state.deletes,
            len(rows), snap.dims,
        )  # fmt: skip
        try:
            self.dir.make()
            snapshot_file.write_file(
                path, header, vids, snap.take_scale(rows), lambda a, b: snap.take(rows[a:b])
            )
        except OSError as e:
            self._cannot_write(path, e)
            return None
        self.dir.fit(keep=path)
        found = snapshot_file.open_file(path, tenant, user_id, self.dimensions)
        if found is None:
            return None  # removed at once (over the budget, or erased meanwhile)
        return building.rebased(snap, found)

    def touch(self, path: str) -> None:
        """Mark a file used, at most every few seconds (least recently used files go first)."""
        now = time.monotonic()
        if now - self._touched.get(path, -math.inf) > 5:
            self._touched[path] = now
            self.dir.touch(path)

    def forget(self, tenant: str, user_id: str) -> None:
        """Remove a user's file (erased: nothing of theirs is kept)."""
        if snapshot_file.fits(tenant, user_id):
            self.dir.remove(self.dir.file_of(tenant, user_id))

    def sweep(self, source: VectorSource) -> None:
        """One worker at a time: no file keeps what was erased; temporary leftovers go."""
        with _exclusive(self.dir.path) as mine:
            if not mine:
                return  # another worker is at it
            self.dir.sweep_temporary()
            for path in self.dir.files():
                self._sweep_file(source, path)
            self.dir.fit()

    def _sweep_file(self, source: VectorSource, path: str) -> None:
        checked = snapshot_file.read_header(path)
        if checked is None:
            self.dir.remove(path)  # not a file this memsvc can read
            return
        header, _ = checked
        ino = snapshot_file.inode(path)
        with source.read():
            state = source.user_state(header.tenant, header.user_id)
            if (
                state is None
                or state.user_key != header.user_key
                or state.generation != header.generation
                or header.dims != self.dimensions
            ):
                self.dir.remove(path)  # erased, or every vector replaced
                return
            if state.deletes == header.deletes or (
                ino is not None and self._checked.get((path, ino)) == state.deletes
            ):
                return  # nothing deleted since the file's rows were listed
            entries = source.entries(header.tenant, header.user_id)
        found = snapshot_file.open_file(path, header.tenant, header.user_id, self.dimensions)
        if found is None:
            return
        keep = np.isin(found.vids, entries.vids())
        if keep.all():
            self._checked[(path, found.inode)] = state.deletes
            return
        rows = np.flatnonzero(keep)
        compacted = snapshot_file.Header(
            header.tenant, header.user_id, header.user_key, header.generation, state.deletes,
            len(rows), header.dims,
        )  # fmt: skip
        try:
            snapshot_file.write_file(
                path, compacted, found.vids[rows], found.scale[rows],
                lambda a, b: found.matrix[rows[a:b]],
            )  # fmt: skip
        except OSError:
            self.dir.remove(path)  # a file that cannot be rewritten must not keep them
        log.info("search cache: rewrote %s without %d deleted vectors", path, len(keep) - len(rows))

    def _cannot_write(self, path: str, error: OSError) -> None:
        """No more files from this worker: its users stay in its memory."""
        if not self.write_failed:
            log.warning("search cache: cannot write %s (%s); keeping vectors per worker",
                        path, error)  # fmt: skip
        self.write_failed = True


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
