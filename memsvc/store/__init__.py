"""Where memsvc keeps its data: a SQLite file (the default) or PostgreSQL.

:class:`FullStore` is the contract both stores keep (:mod:`.base`): a
tenant's memories and keys and what every store must do (:class:`Store`),
sessions of messages (:class:`Conversations`, :mod:`.sessions`), what search
reads (:class:`VectorSource`, :mod:`.vector_source`), export, import and
re-embedding (:class:`Bulk`, :class:`Reembedding`, :mod:`.bulk`).
:class:`~.sql.SqlStore` is what the two share of it, written once (:mod:`.sql`);
:class:`Backend` is a whole database of either kind (:mod:`.backend`): its
connections, limiter, preparation and locks. :func:`open_backend` picks one from
``MEMSVC_DATABASE``: a ``postgresql://`` URL selects PostgreSQL with
pgvector (:mod:`.postgres`), anything else is the path of a SQLite file with
sqlite-vec (:mod:`.sqlite`). Each kind is a package of the same parts:
``store``, ``schema``, ``connection``, ``backend``; :mod:`.postings` is
the keyword index both keep alike.
"""

from __future__ import annotations

import typing as t

from .backend import Backend
from .backend import BackupError
from .backend import BackupRefused
from .backend import DatabaseInUse
from .base import FullStore
from .base import Store
from .bulk import Bulk
from .bulk import Reembedding
from .schema import SCHEMA_VERSION
from .schema import StoreMismatch
from .sessions import Conversations
from .sqlite import Database
from .sqlite import SqliteStore
from .sqlite import connect
from .vector_source import Entries
from .vector_source import Entry
from .vector_source import UserState
from .vector_source import VectorSource

__all__ = [
    "Backend", "BackupError", "BackupRefused", "Bulk", "Conversations", "Database",
    "DatabaseInUse", "Entries", "Entry", "FullStore", "Reembedding", "SCHEMA_VERSION",
    "SqliteStore", "Store", "StoreMismatch", "UserState", "VectorSource", "connect",
    "is_postgres", "open_backend", "storage_problem",
]  # fmt: skip


def is_postgres(database: str) -> bool:
    """Whether ``MEMSVC_DATABASE`` names a PostgreSQL database rather than a file."""
    return database.startswith(("postgresql://", "postgres://"))


def open_backend(settings: t.Mapping[str, t.Any], instance_path: str) -> Backend:
    """The database the settings name; nothing is opened until it is used."""
    database = settings["DATABASE"]
    if is_postgres(database):
        from .postgres.backend import PostgresBackend

        # A connection per thread at most, and a few for the limiter and
        # the maintenance thread.
        return PostgresBackend(database, max_size=settings["THREADS"] + 4)
    from .sqlite.backend import SqliteBackend

    return SqliteBackend(
        database,
        instance_path=instance_path,
        limits_dir=settings["LIMITS_DIR"],
        busy_timeout_ms=settings["SQLITE_BUSY_TIMEOUT_MS"],
        synchronous=settings["SQLITE_SYNCHRONOUS"],
        mmap_mb=settings["SQLITE_MMAP_MB"],
    )


def storage_problem(exc: BaseException) -> str | None:
    """What is wrong with the storage if ``exc`` is the database failing, else None."""
    from .sqlite.connection import storage_problem as sqlite_problem

    problem = sqlite_problem(exc)
    if problem is None and type(exc).__module__.startswith("psycopg"):
        from .postgres.connection import storage_problem as pg_problem

        problem = pg_problem(exc)
    return problem
