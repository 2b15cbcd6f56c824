"""PostgreSQL connections: a psycopg pool per process, pgvector's type, what errors mean.

Each worker process has its own pool, made on first use (never in
gunicorn's master before the fork: a pool runs threads, and a connection
must not be shared by two processes). A request takes one connection for
its whole length and gives it back at its end (:meth:`PgDatabase.release`).

Vectors travel in pgvector's binary format: a 2-byte dimension count, 2
unused bytes, then big-endian float32s. They are written as pgvector
values and read back as those float32s alone (``memory_vectors.floats``),
whole arrays converted at once (:func:`floats_of`) instead of one Python
object per number.
"""

from __future__ import annotations

import os
import struct
import threading
import typing as t
import weakref

import numpy as np
import psycopg
import psycopg.conninfo
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.pq import TransactionStatus
from psycopg.types import TypeInfo

#: Shown in pg_stat_activity: how ``memsvc reembed`` tells a running server.
SERVER_APPLICATION = "memsvc-server"
TOOL_APPLICATION = "memsvc"


class _VectorDumper(Dumper):
    """A float32 numpy vector as pgvector's binary ``vector``."""

    format = Format.BINARY

    def dump(self, obj: t.Any) -> bytes:
        vector = np.asarray(obj, dtype=">f4")
        return struct.pack(">HH", vector.shape[0], 0) + vector.tobytes()


def register_vector(conn: psycopg.Connection[t.Any]) -> bool:
    """Send numpy arrays as pgvector vectors on ``conn``; False if pgvector is not installed."""
    info = TypeInfo.fetch(conn, "vector")
    if info is None:
        return False
    dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(np.ndarray, dumper)
    return True


def floats_of(blobs: t.Sequence[bytes]) -> np.ndarray:
    """Values of ``memory_vectors.floats`` (all of one size), as one float32 array, a row each.

    ``floats`` is a vector as pgvector sends it less its 4-byte header:
    big-endian float32s, converted here all at once.
    """
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    joined = b"".join(blobs)
    return np.frombuffer(joined, dtype=">f4").reshape(len(blobs), -1).astype(np.float32)


def _configure(conn: psycopg.Connection[t.Any]) -> None:
    conn.autocommit = True  # the store opens every transaction itself
    register_vector(conn)


class PgDatabase:
    """Connections to one PostgreSQL database: a pool, and this thread's checked-out one."""

    def __init__(self, url: str, *, max_size: int, application: str = TOOL_APPLICATION):
        self.url = url
        self.max_size = max_size
        self.application = application
        self._pool: psycopg_pool.ConnectionPool[t.Any] | None = None
        self._pool_lock = threading.Lock()
        self._local = threading.local()
        me = weakref.ref(self)

        def forget_in_child() -> None:
            # The parent's pool, its threads and sockets are not this process's.
            db = me()
            if db is not None:
                db._pool = None
                db._local = threading.local()

        os.register_at_fork(after_in_child=forget_in_child)

    @property
    def pool(self) -> psycopg_pool.ConnectionPool[t.Any]:
        with self._pool_lock:
            if self._pool is None:
                self._pool = psycopg_pool.ConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self.max_size,
                    kwargs={"application_name": self.application, "autocommit": True},
                    configure=_configure,
                    name="memsvc",
                    timeout=30.0,
                    open=True,
                )
            return self._pool

    def connection(self) -> psycopg.Connection[t.Any]:
        """This thread's connection, taken from the pool until :meth:`release`."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.pool.getconn()
            self._local.conn = conn
        return conn

    def release(self) -> None:
        """Give this thread's connection back, with no transaction left open."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            try:
                conn.rollback()
            except psycopg.Error:
                conn.close()
        self.pool.putconn(conn)

    def discard(self) -> None:
        """Close this thread's connection (it failed); the pool makes a new one."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        conn.close()
        self.pool.putconn(conn)

    def close(self) -> None:
        """Close the pool and every connection; only while no request is using one."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        self._local = threading.local()
        if pool is not None:
            pool.close()

    def pooled(self) -> t.ContextManager[psycopg.Connection[t.Any]]:
        """A connection from the pool for one short piece of work (the limiter's)."""
        return self.pool.connection()

    def connect(self) -> psycopg.Connection[t.Any]:
        """A connection of its own, outside the pool (closing it is the caller's)."""
        conn = psycopg.connect(self.url, application_name=self.application, autocommit=True)
        register_vector(conn)
        return conn


# SQLSTATE classes and codes, and what they mean for the operator.
_PROBLEMS: tuple[tuple[type[Exception], str], ...] = (
    (pg_errors.ReadOnlySqlTransaction, "the database is read-only"),
    (pg_errors.DiskFull, "the disk (or the database's size limit) is full"),
    (pg_errors.OutOfMemory, "the database server is out of memory"),
    (pg_errors.InsufficientResources, "the database server is out of resources"),
    (pg_errors.TooManyConnections, "the database server has no connection left"),
    (pg_errors.IoError, "the disk failed to read or write (I/O error)"),
    (pg_errors.DataCorrupted, "the database is damaged"),
    (pg_errors.IndexCorrupted, "the database is damaged"),
    (pg_errors.LockNotAvailable, "the database stayed locked by another writer"),
    (pg_errors.AdminShutdown, "the database server is shutting down"),
    (pg_errors.CannotConnectNow, "the database server is starting up or shutting down"),
)


def storage_problem(exc: BaseException) -> str | None:
    """What is wrong with PostgreSQL if ``exc`` is it failing, else None."""
    for kind, meaning in _PROBLEMS:
        if isinstance(exc, kind):
            return meaning
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        # The server went away, or no connection could be had in time.
        return "the database server cannot be reached"
    return None


def database_name(url: str) -> str:
    """The database a URL names, for messages: never its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an unreadable URL)"
    host = params.get("host") or "localhost"
    return f"database {params.get('dbname') or '(default)'!s} on {host}"


def servers_connected(db: PgDatabase) -> int:
    """How many connections of running memsvc servers the database has now."""
    with db.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s AND pid <> pg_backend_pid()",
            (SERVER_APPLICATION,),
        ).fetchone()
    return int(row[0]) if row else 0
