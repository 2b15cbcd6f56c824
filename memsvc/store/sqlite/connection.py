"""SQLite connections: the driver, sqlite-vec, pragmas, one connection per thread.

This is the only module that knows which ``sqlite3`` implementation is in
use. Many Pythons (pyenv builds, macOS system Pythons) ship a ``sqlite3``
that cannot load extensions, so sqlite-vec could not load there; memsvc
then uses ``sqlean`` (sqlean-py, a drop-in build of the same module with
extension loading on), or ``pysqlite3`` if that is what is installed.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import types
import typing as t

import sqlite_vec

from ...errors import ConfigError

#: A connection from whichever driver was chosen (sqlean and pysqlite3 are the same module).
Connection: t.TypeAlias = sqlite3.Connection


def _can_load_sqlite_vec(module: types.ModuleType) -> bool:
    try:
        conn = module.connect(":memory:")
    except Exception:
        return False
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.execute("SELECT vec_version()")
        return True
    except Exception:
        return False
    finally:
        conn.close()


@functools.cache
def driver() -> types.ModuleType:
    """The first available sqlite3 module that can load sqlite-vec."""
    candidates = []
    import sqlite3

    candidates.append(sqlite3)
    try:
        import sqlean

        candidates.append(sqlean)
    except ImportError:
        pass
    try:
        from pysqlite3 import dbapi2 as pysqlite3

        candidates.append(pysqlite3)
    except ImportError:
        pass
    for module in candidates:
        if hasattr(module.Connection, "enable_load_extension") and _can_load_sqlite_vec(module):
            return module
    raise ConfigError(
        "no sqlite3 module here can load sqlite-vec: this Python's sqlite3 cannot load "
        "extensions; install sqlean-py (pip install sqlean-py)"
    )


def connect(
    path: str, *, busy_timeout_ms: int = 10_000, synchronous: str = "FULL", mmap_mb: int = 0
) -> Connection:
    """Open ``path`` with sqlite-vec loaded and memsvc's pragmas set.

    The connection is in autocommit mode: the store opens every transaction
    itself, with ``BEGIN IMMEDIATE`` for writes so that a writer waits for
    the lock up front instead of failing half-way.
    """
    module = driver()
    conn = module.connect(
        path,
        timeout=busy_timeout_ms / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA mmap_size = {int(mmap_mb) * 1024 * 1024}")
        # Deleted content is overwritten, not left in free pages: erasure
        # leaves nothing behind in the file.
        conn.execute("PRAGMA secure_delete = ON")
        # After a checkpoint the WAL is cut back to nothing, so the old
        # versions of overwritten pages do not linger in it either.
        conn.execute("PRAGMA journal_size_limit = 0")
    except Exception:
        conn.close()
        raise
    return conn


class Database:
    """Connections to one database file, one per thread, reused across requests.

    Opening a connection and loading sqlite-vec costs more than most
    queries, so each worker thread keeps its own. Connections are made
    lazily, so none exists before gunicorn forks its workers.
    """

    def __init__(
        self,
        path: str,
        *,
        busy_timeout_ms: int = 10_000,
        synchronous: str = "FULL",
        mmap_mb: int = 0,
    ):
        self.path = path
        self._options: dict[str, t.Any] = {
            "busy_timeout_ms": busy_timeout_ms,
            "synchronous": synchronous,
            "mmap_mb": mmap_mb,
        }
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[Connection] = []

    def connection(self) -> Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, **self._options)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def release(self) -> None:
        """A request is done with this thread's connection: it stays, for the next."""

    def discard(self) -> None:
        """Close this thread's connection, e.g. after it hit an I/O error."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            with self._lock:
                self._all.remove(conn)
            conn.close()

    def close(self) -> None:
        """Close every connection; only while no request is using one."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


# What SQLite says, and what it means for the operator.
_PROBLEMS = (
    ("readonly", "the database is read-only"),
    ("database or disk is full", "the disk (or the database's size limit) is full"),
    ("disk i/o error", "the disk failed to read or write (I/O error)"),
    ("unable to open database file", "the database file cannot be opened"),
    ("database is locked", "the database stayed locked by another writer"),
    ("database disk image is malformed", "the database file is damaged"),
    ("file is not a database", "the database file is damaged"),
)


def storage_problem(exc: BaseException) -> str | None:
    """What is wrong with the storage if ``exc`` is SQLite failing, else None."""
    if not isinstance(exc, driver().Error):
        return None
    text = str(exc).lower()
    return next((meaning for words, meaning in _PROBLEMS if words in text), None)
