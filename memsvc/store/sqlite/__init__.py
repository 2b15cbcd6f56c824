"""The SQLite store: memsvc's data in one file, with sqlite-vec for vectors.

Vectors are in ``memory_vectors``, a sqlite-vec ``vec0`` table partitioned by
tenant and user, so a search reads only that user's vectors; the keyword
index is ``memory_terms`` (:mod:`..postings`), per user. One
writer at a time (``BEGIN IMMEDIATE``), readers in parallel (WAL).

The store is :mod:`.store`; connections (the driver, sqlite-vec, pragmas)
are in :mod:`.connection`, the schema in :mod:`.schema`, what memsvc knows
of vec0's storage in :mod:`.vec0`, backups in :mod:`.backup`.
"""

from __future__ import annotations

from .connection import Database
from .connection import connect
from .store import SqliteStore

__all__ = ["Database", "SqliteStore", "connect"]
