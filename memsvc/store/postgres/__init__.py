"""The PostgreSQL store: memsvc's data in a PostgreSQL database with pgvector.

Several app servers, each with several worker processes, can share one
database. The contract is :class:`memsvc.store.Store`'s; what differs from
SQLite, and why:

* **Writers of one end user take turns**, by a transaction-level advisory
  lock on the user taken before anything of theirs is read or written
  (:meth:`PgStore._lock_user`). Writers of different users run in parallel.
  So a user's vector ids grow in commit order (the search cache's
  incremental loads rely on it), a dedupe check and its insert are one
  step, and two updates of a memory do not both become the same version.
* **Vector ids are counted per user** (``memory_users.max_vid``, under that
  lock): no global counter for every writer to queue on.
* **Reads see one snapshot**: ``REPEATABLE READ, READ ONLY`` transactions,
  as SQLite's read transactions do.
* **The keyword index** is the same as SQLite's (:mod:`..postings`), so
  keyword search ranks alike on both.

The store is :mod:`.store`; connections and pgvector's wire format are in
:mod:`.connection`, the schema in :mod:`.schema`, the per-key limits in
:mod:`.limits`.
"""

from __future__ import annotations

from .connection import PgDatabase
from .store import PgStore

__all__ = ["PgDatabase", "PgStore"]
