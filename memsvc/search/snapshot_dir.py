"""The folder of a box's snapshot files (:mod:`.snapshot_file`): where, how many, and who writes.

Files are named after their user (a digest of tenant and user id); the
folder is kept within the search cache's budget, least recently used files
removed first; a byte lock per file makes a second worker loading the same
user wait for the first to publish it; temporary files of writers killed
half way are swept.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
import typing as t

from .snapshot_file import LOCK_NAME
from .snapshot_file import SUFFIX
from .snapshot_file import TMP_SUFFIX
from .snapshot_file import name_bytes


class SnapshotDir:
    """The folder of a box's snapshot files, kept within ``max_bytes`` in all."""

    def __init__(self, path: str, max_bytes: int):
        self.path = path
        self.max_bytes = max_bytes
        # Never closed while this object lives: closing any descriptor of a
        # file lets go of every lock the process holds on it.
        self._lock_fd: int | None = None

    def make(self) -> None:
        """Create the folder (private), when a first file is to be written in it."""
        os.makedirs(self.path, mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def writing(self, path: str) -> t.Iterator[None]:
        """Held by one process at a time per file (threads of one process: see the caller).

        A byte of the folder's lock file, chosen by the file's name: a
        second worker loading the same user waits, then maps what the first
        published rather than reading and writing it all again. The kernel
        lets go of it if the holder dies.
        """
        if self._lock_fd is None:
            try:
                self.make()
                self._lock_fd = os.open(os.path.join(self.path, LOCK_NAME),
                                        os.O_RDWR | os.O_CREAT, 0o600)  # fmt: skip
            except OSError:
                yield  # no folder: nothing to publish (the caller finds out), nothing to wait for
                return
        byte = int(os.path.basename(path)[:8], 16)
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX, 1, byte)
        try:
            yield
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, byte)

    def file_of(self, tenant: str, user_id: str) -> str:
        t_bytes, u_bytes = name_bytes(tenant, user_id)
        digest = hashlib.sha256(t_bytes + b"\0" + u_bytes).hexdigest()[:40]
        return os.path.join(self.path, digest + SUFFIX)

    def files(self) -> list[str]:
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        return [os.path.join(self.path, n) for n in names if n.endswith(SUFFIX) and n[0] != "."]

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    def clear(self) -> int:
        """Remove every file (a server starting: the database may have been restored)."""
        removed = 0
        with contextlib.suppress(OSError):
            for name in os.listdir(self.path):
                if name.endswith(SUFFIX) or name.endswith(TMP_SUFFIX):
                    self.remove(os.path.join(self.path, name))
                    removed += 1
        return removed

    def fit(self, keep: str | None = None) -> None:
        """Remove the least recently used files until all fit ``max_bytes`` (never ``keep``)."""
        found = []
        for path in self.files():
            with contextlib.suppress(OSError):
                st = os.stat(path)
                found.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in found)
        for _, size, path in sorted(found):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            self.remove(path)
            total -= size

    def touch(self, path: str) -> None:
        """Mark a file used now (the folder's least recently used go first)."""
        with contextlib.suppress(OSError):
            os.utime(path)

    def sweep_temporary(self, older_than: float = 3600.0) -> int:
        """Remove temporary files of writers that are gone (killed half way) or long stuck."""
        removed = 0
        now = time.time()
        with contextlib.suppress(OSError):
            for name in os.listdir(self.path):
                if not name.endswith(TMP_SUFFIX):
                    continue
                path = os.path.join(self.path, name)
                parts = name.split(".")
                pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else 0
                try:
                    age = now - os.stat(path).st_mtime
                except OSError:
                    continue
                if age > older_than or (pid != os.getpid() and not _alive(pid)):
                    self.remove(path)
                    removed += 1
        return removed


def clear_snapshots(path: str) -> int:
    """Remove every snapshot file of the folder at ``path``, if there is one."""
    if not os.path.isdir(path):
        return 0
    return SnapshotDir(path, 0).clear()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shared_dir(settings: t.Mapping[str, t.Any], instance_path: str) -> str:
    """Where a box keeps its snapshot files: ``SEARCH_SHARED_DIR``, or by default...

    SQLite: beside the database (``<database>.search``), so a box's workers
    share it and another database never does. PostgreSQL: under the
    instance folder, one folder per database address (each server its own).
    """
    if settings.get("SEARCH_SHARED_DIR"):
        return os.path.abspath(settings["SEARCH_SHARED_DIR"])
    database = str(settings.get("DATABASE") or "")
    if database.startswith(("postgresql://", "postgres://")):
        digest = hashlib.sha256(_without_password(database).encode()).hexdigest()[:16]
        return os.path.join(instance_path, "search-cache", digest)
    if not database:
        return os.path.join(instance_path, "search-cache", "default")
    return os.path.abspath(database) + ".search"


def _without_password(url: str) -> str:
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}@" if parts.username else ""
    return urllib.parse.urlunsplit((parts.scheme, user + host + port, parts.path, "", ""))
