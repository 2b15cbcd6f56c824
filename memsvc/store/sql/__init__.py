"""What the two stores share: the SQL that reads the same on SQLite and PostgreSQL, once.

:class:`SqlStore` keeps the :class:`~memsvc.store.base.FullStore` contract
for both, a part per job: the frame (:mod:`.frame`: transactions, the
schema's migration runner, ``memsvc_meta``), a tenant's memories
(:mod:`.memory_sql`), API keys (:mod:`.key_sql`), what search reads
(:mod:`.search_sql`), export, import and re-embedding (:mod:`.bulk_sql`).
Statements are written with ``?`` placeholders; PostgreSQL's store turns
them into psycopg's ``%s`` (:meth:`SqlStore._execute`). Each store keeps
only what differs: where vectors live and how their ids are given, how
writers of one user take turns, sets of values in a query (``IN`` or
``= ANY``), and what each database does for health and erasure.
"""

from __future__ import annotations

from ..conversations import ConversationSql
from ..job_sql import JobSql
from .bulk_sql import SqlBulk
from .bulk_sql import build_postings
from .frame import VISIBLE
from .frame import Cursor
from .frame import SqlFrame
from .frame import Step
from .key_sql import SqlKeys
from .memory_sql import SqlMemories
from .memory_sql import windows_of
from .search_sql import SqlSearchReads

__all__ = [
    "VISIBLE", "Cursor", "SqlFrame", "SqlStore", "Step", "build_postings", "windows_of",
]  # fmt: skip


class SqlStore(ConversationSql, JobSql, SqlMemories, SqlSearchReads, SqlKeys, SqlBulk):
    """The contract, kept with the SQL both stores share; subclasses fill in the rest."""
