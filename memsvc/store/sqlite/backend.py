"""A SQLite deployment: one file, the workers of one box, their limits in shared memory."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil

from ...errors import ConfigError
from ...limits import Limiter
from ...limits import default_directory
from ..backend import Backend
from ..backend import DatabaseInUse
from ..backend import StorageFailures
from ..signouts import FileSignOuts
from .backup import backup as copy_database
from .connection import Database
from .store import SqliteStore

log = logging.getLogger(__name__)


class SqliteBackend(Backend):
    """A SQLite file: a connection per thread, the limiter's files, a lock for servers."""

    kind = "SQLite"

    def __init__(
        self,
        path: str,
        *,
        instance_path: str,
        limits_dir: str | None = None,
        busy_timeout_ms: int = 10_000,
        synchronous: str = "FULL",
        mmap_mb: int = 0,
    ):
        self.path = path
        self.instance_path = instance_path
        self.limits_dir = limits_dir
        self.db: Database = Database(
            path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous, mmap_mb=mmap_mb
        )
        self._limiter: Limiter | None = None
        self._signouts: FileSignOuts | None = None
        self._serving_lock: int | None = None
        # The limiter's private folder is shared by the workers of this
        # database (on tmpfs where there is one): their /health all know.
        self.failures = StorageFailures(
            lambda: os.path.join(self.limiter.directory, "storage-trouble")
        )

    @property
    def shown(self) -> str:
        return repr(self.path)

    @property
    def limiter(self) -> Limiter:
        """The per-key limiter; its folder is named after the database, so it exists first."""
        if self._limiter is None:
            directory = self.limits_dir or default_directory(self.path, self.instance_path)
            try:
                self._limiter = Limiter(directory)
            except OSError as e:
                raise ConfigError(
                    f"MEMSVC_LIMITS_DIR {directory!r} cannot be used: {e}; remove it, or set "
                    "MEMSVC_LIMITS_DIR to a private folder"
                ) from None
        return self._limiter

    @property
    def signouts(self) -> FileSignOuts:
        """Signed-out console sessions: files in a private folder beside the database."""
        if self._signouts is None:
            self._signouts = FileSignOuts(self._signouts_path())
        return self._signouts

    def _signouts_path(self) -> str:
        return self.path + ".signouts"

    # -- connections -----------------------------------------------------------------

    def store(self) -> SqliteStore:
        return SqliteStore(self.db.connection())

    def close(self) -> None:
        self.disconnect()
        if self._serving_lock is not None:
            os.close(self._serving_lock)
            self._serving_lock = None

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def remove(self) -> None:
        """The file, its -wal, -shm and -journal, its signed-out sessions, and the limiter's
        folder if it was memsvc's choice (not MEMSVC_LIMITS_DIR's)."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + suffix)
        if self.limits_dir is None and self._limiter is not None:
            shutil.rmtree(self._limiter.directory, ignore_errors=True)
        shutil.rmtree(self._signouts_path(), ignore_errors=True)

    # -- getting ready, and who uses the database --------------------------------------

    def _make_room(self) -> None:
        """The file's folder exists, the file is private, the limits folder is ours."""
        default_folder = os.path.join(self.instance_path, "")
        if os.path.abspath(self.path).startswith(os.path.abspath(default_folder)):
            # The instance folder holds the database and the token secret.
            os.makedirs(self.instance_path, mode=0o700, exist_ok=True)
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            problem = "is not a folder" if os.path.exists(folder) else "does not exist"
            raise ConfigError(f"MEMSVC_DATABASE {self.path!r} cannot be used: {folder} {problem}")
        create_private(self.path)
        # A planted or shared limits folder stops start-up here, not a request.
        log.debug("limits in %s", self.limiter.directory)

    def hold_for_serving(self) -> None:
        """A shared lock on a file beside the database, held until the process ends.

        Maintenance that must not run under a live server (``memsvc
        reembed``) asks for it exclusively and is refused.
        """
        fd = os.open(self._lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._serving_lock = fd

    def exclusive(self) -> None:
        fd = os.open(self._lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DatabaseInUse(f"a memsvc server is using {self.path}; stop it first") from None
        self._serving_lock = fd

    def _lock_path(self) -> str:
        return self.path + ".serving.lock"

    def backup(self, path: str, *, replace: bool = False) -> dict[str, int]:
        """SQLite's online backup: one moment's snapshot, taken while writers go on."""
        if os.path.exists(path) and not replace:
            raise FileExistsError(path)
        return copy_database(self.db.connection(), path)


def create_private(path: str) -> None:
    """Create ``path`` readable by its owner only, unless it exists.

    SQLite creates a missing database with the umask's permissions (often
    world-readable) and gives its -wal and -shm files the database's; made
    0600 here, all three stay private.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
