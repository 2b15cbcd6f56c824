"""The SQLite schema: its migrations, one numbered step at a time.

:meth:`memsvc.store.sql.SqlStore.migrate` runs them, bringing any older
database up to :data:`~memsvc.store.schema.SCHEMA_VERSION` in one
transaction; ``memsvc_meta`` records the schema version and the embedding
model the stored vectors come from.
"""

from __future__ import annotations

import hashlib
import json
import typing as t

from ...models import dedupe_key
from ..conversations import CONVERSATION_INDEXES
from ..conversations import CONVERSATIONS
from ..job_sql import JOB_INDEXES
from ..job_sql import JOB_TABLES
from ..job_sql import JOBS
from ..sql import Step
from ..sql import build_postings
from . import vec0

if t.TYPE_CHECKING:
    from ..sql.frame import SqlFrame


def _dedupe_keys(store: SqlFrame) -> None:
    """Compute the duplicate-detection key of every existing memory."""
    rows = store._rows("SELECT seq, content, metadata FROM memories")
    store._many(
        "UPDATE memories SET dedupe_key = ? WHERE seq = ?",
        [(dedupe_key(content, json.loads(metadata)), seq) for seq, content, metadata in rows],
    )


def _fts_scope(tenant: str, user_id: str) -> str:
    """Schema 4's keyword index: the token that confined a search to one user."""
    digest = hashlib.sha256(f"{tenant}\x00{user_id}".encode("utf-8", "surrogatepass"))
    return "s" + digest.hexdigest()[:24]


def _index_existing_text(store: SqlFrame) -> None:
    rows = store._rows("SELECT seq, tenant, user_id, content FROM memories")
    store._many(
        "INSERT INTO memory_fts (rowid, scope, content) VALUES (?, ?, ?)",
        [(seq, _fts_scope(tenant, user), content) for seq, tenant, user, content in rows],
    )


MIGRATIONS: dict[int, list[Step]] = {
    1: [
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            key_id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            secret_hash BLOB NOT NULL UNIQUE,
            created_at INTEGER NOT NULL,
            last_used_at INTEGER,
            revoked_at INTEGER
        )""",
        "CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at)",
        """CREATE TABLE memories (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            tenant TEXT NOT NULL,
            user_id TEXT NOT NULL,
            content TEXT NOT NULL,
            metadata TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        "CREATE INDEX memories_by_user ON memories (tenant, user_id, created_at DESC, seq DESC)",
        *vec0.TABLE,
    ],
    2: [
        # Per-key overrides of the global request limits (NULL: the default).
        "ALTER TABLE api_keys ADD COLUMN rate_limit INTEGER",
        "ALTER TABLE api_keys ADD COLUMN concurrency_limit INTEGER",
    ],
    3: [
        # One row per end user, changed in the same transaction as their
        # memories: a search cache compares it to tell, with one indexed
        # read, whether a user's vectors changed (even by another process)
        # and how: new memories only (max_seq grew), deletions, or all
        # vectors replaced (generation).
        """CREATE TABLE memory_users (
            tenant TEXT NOT NULL,
            user_id TEXT NOT NULL,
            count INTEGER NOT NULL,
            max_seq INTEGER NOT NULL,
            deletes INTEGER NOT NULL,
            generation INTEGER NOT NULL,
            PRIMARY KEY (tenant, user_id)
        ) WITHOUT ROWID""",
        """INSERT INTO memory_users (tenant, user_id, count, max_seq, deletes, generation)
        SELECT tenant, user_id, count(*), max(seq), 0, 0 FROM memories GROUP BY tenant, user_id""",
        # A user's memories in insertion order, with their times: loads a
        # user's new memories, and lists them, without touching the table.
        "CREATE INDEX memories_by_user_seq ON memories (tenant, user_id, seq, created_at)",
    ],
    4: [
        # Versions: a memory's earlier versions live in memory_history.
        "ALTER TABLE memories ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE memories ADD COLUMN expires_at INTEGER",
        # Long memories have several vectors (windows), with consecutive
        # ids first_vid .. first_vid + windows - 1 in memory_vectors; ids
        # come from a counter in memsvc_meta and are never reused. Until now
        # a memory's one vector had id seq.
        "ALTER TABLE memories ADD COLUMN first_vid INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE memories ADD COLUMN windows INTEGER NOT NULL DEFAULT 1",
        "UPDATE memories SET first_vid = seq",
        """INSERT INTO memsvc_meta (key, value)
        SELECT 'next_vid', coalesce(max(seq), 0) + 1 FROM memories""",
        # memory.add with dedupe: the trimmed text and canonical metadata.
        "ALTER TABLE memories ADD COLUMN dedupe_key BLOB",
        _dedupe_keys,
        "DROP INDEX memories_by_user_seq",
        # A user's memories by vector id: the search cache loads new ones.
        "CREATE INDEX memories_by_user_vid ON memories (tenant, user_id, first_vid)",
        "CREATE INDEX memories_by_dedupe_key ON memories (tenant, user_id, dedupe_key)",
        "CREATE INDEX memories_expiring ON memories (expires_at) WHERE expires_at IS NOT NULL",
        """CREATE TABLE memory_history (
            memory_seq INTEGER NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,
            version INTEGER NOT NULL,
            content TEXT NOT NULL,
            metadata TEXT NOT NULL,
            at INTEGER NOT NULL,
            PRIMARY KEY (memory_seq, version)
        ) WITHOUT ROWID""",
        # The search cache's counters now count vectors: max_vid grows with
        # new vectors (an update's too); updates counts changes of metadata
        # or expiry alone.
        "ALTER TABLE memory_users RENAME COLUMN max_seq TO max_vid",
        "ALTER TABLE memory_users ADD COLUMN updates INTEGER NOT NULL DEFAULT 0",
        # Keyword search: the index only (the text stays in memories),
        # scoped to one user by a token of its own in the scope column. Rows
        # are deleted with FTS5's 'delete' command and the text they were
        # indexed with, which secure-delete turns into removing every trace
        # from the index (contentless_delete=1 would only mark them deleted).
        """CREATE VIRTUAL TABLE memory_fts USING fts5(
            scope, content, content='', tokenize='unicode61 remove_diacritics 2'
        )""",
        "INSERT INTO memory_fts (memory_fts, rank) VALUES ('secure-delete', 1)",
        _index_existing_text,
    ],
    5: [
        # End users get a number of their own (never reused, so a user erased
        # and back again is a new user to every cache) and the total length
        # of their texts; a user's row goes when their last memory does.
        """CREATE TABLE memory_users_new (
            user_key INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant TEXT NOT NULL,
            user_id TEXT NOT NULL,
            count INTEGER NOT NULL,
            max_vid INTEGER NOT NULL,
            deletes INTEGER NOT NULL,
            updates INTEGER NOT NULL,
            generation INTEGER NOT NULL,
            terms INTEGER NOT NULL DEFAULT 0,
            last_write INTEGER NOT NULL DEFAULT 0,
            UNIQUE (tenant, user_id)
        )""",
        """INSERT INTO memsvc_meta (key, value)
        SELECT 'erasures', coalesce(sum(deletes) + sum(generation), 0) FROM memory_users""",
        """INSERT INTO memory_users_new (tenant, user_id, count, max_vid, deletes, updates,
            generation, last_write)
        SELECT u.tenant, u.user_id, u.count, u.max_vid, u.deletes, u.updates, u.generation,
            (SELECT coalesce(max(updated_at), 0) FROM memories AS m
             WHERE m.tenant = u.tenant AND m.user_id = u.user_id)
        FROM memory_users AS u WHERE u.count > 0 ORDER BY u.tenant, u.user_id""",
        "DROP TABLE memory_users",
        "ALTER TABLE memory_users_new RENAME TO memory_users",
        # The keyword index, per user: each term's memories, with the term's
        # count in the memory and the memory's length in terms (BM25), terms
        # as hashes (memsvc.terms). A search reads only its user's rows, and
        # ranks by their statistics alone.
        """CREATE TABLE memory_terms (
            user_key INTEGER NOT NULL,
            term INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            tf INTEGER NOT NULL,
            dl INTEGER NOT NULL,
            PRIMARY KEY (user_key, term, seq)
        ) WITHOUT ROWID""",
        build_postings,
        # With secure_delete on, the old index's pages are zeroed as they are freed.
        "DROP TABLE memory_fts",
    ],
    # Schema 6 is PostgreSQL's alone (each vector's float32s in a column of
    # their own, for loading users); SQLite's vectors are raw float32s already.
    6: [],
    7: [*CONVERSATIONS],
    8: [
        # The operator's limits of a key (memsvc keys set-limits) apart from
        # those its tenant chose (keys.setLimits), which may only be lower:
        # until now one pair held both. A pair set before is taken as the
        # operator's, so no tenant gets more than it had.
        "ALTER TABLE api_keys ADD COLUMN rate_ceiling INTEGER",
        "ALTER TABLE api_keys ADD COLUMN concurrency_ceiling INTEGER",
        "UPDATE api_keys SET rate_ceiling = rate_limit, concurrency_ceiling = concurrency_limit",
    ],
    # Extraction: its jobs, the tokens they spend, and versions that no add or update made.
    9: [*JOBS],
}


#: Every part of the current schema: (kind, name) as sqlite_master lists them
#: (the indexes SQLite makes for a table's own constraints come with it).
OBJECTS = frozenset(
    [("table", name) for name in (
        "memsvc_meta", "api_keys", "memories", "memory_history", "memory_users",
        "memory_terms", "memory_vectors", "memory_sessions", *JOB_TABLES, *vec0.SHADOW_TABLES,
    )]
    + [("index", name) for name in (
        "api_keys_by_tenant", "memories_by_user", "memories_by_user_vid",
        "memories_by_dedupe_key", "memories_expiring", "memory_vectors_chunks_by_partition",
        *CONVERSATION_INDEXES, *JOB_INDEXES,
    )]
)  # fmt: skip
