"""Where memsvc keeps its data: a SQLite file (the default) or PostgreSQL.

:class:`Store` is the contract both keep (:mod:`.base`); :func:`open_database`
picks one from ``MEMSVC_DATABASE``: a ``postgresql://`` URL selects
PostgreSQL with pgvector (:mod:`.postgres`), anything else is the path of a
SQLite file with sqlite-vec (:mod:`.sqlite`).
"""

from __future__ import annotations

from .base import Entry
from .base import Store
from .base import UserState
from .schema import SCHEMA_VERSION
from .schema import StoreMismatch
from .sqlite import Database
from .sqlite import SqliteStore
from .sqlite import connect

__all__ = [
    "Database", "Entry", "SCHEMA_VERSION", "SqliteStore", "Store", "StoreMismatch", "UserState",
    "connect", "is_postgres", "storage_problem",
]  # fmt: skip


def is_postgres(database: str) -> bool:
    """Whether ``MEMSVC_DATABASE`` names a PostgreSQL database rather than a file."""
    return database.startswith(("postgresql://", "postgres://"))


def storage_problem(exc: BaseException) -> str | None:
    """What is wrong with the storage if ``exc`` is the database failing, else None."""
    from .sqlite.connection import storage_problem as sqlite_problem

    problem = sqlite_problem(exc)
    if problem is None and type(exc).__module__.startswith("psycopg"):
        from .postgres.connection import storage_problem as pg_problem

        problem = pg_problem(exc)
    return problem
