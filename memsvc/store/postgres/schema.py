"""The PostgreSQL schema, and its migrations one numbered step at a time.

The same data as the SQLite schema (:mod:`memsvc.store.sqlite.schema`), in
PostgreSQL's terms: vectors in a pgvector ``vector`` column, one row per
window, keyed by user and a vector id counted per user (``memory_users.max_vid``,
so no global counter serialises writers); the keyword index the same rows
as SQLite's (:mod:`..postings`; schema 4 had a ``tsvector`` computed from the
text); the limiter's state in tables of its own
(:mod:`.limits`). Version numbers are shared with SQLite: a PostgreSQL
database starts at the version that first supported it.
"""

from __future__ import annotations

from ..conversations import CONVERSATION_INDEXES
from ..conversations import CONVERSATIONS
from ..job_sql import JOB_INDEXES
from ..job_sql import JOB_TABLES
from ..job_sql import JOBS
from ..sql import Step
from ..sql import build_postings
from .limits import OBJECTS as LIMITS_OBJECTS
from .limits import SCHEMA as LIMITS_SCHEMA

#: The first schema version a PostgreSQL database can have.
FIRST_VERSION = 4

#: Schema 4's text search configuration (its keyword index, until schema 5).
TEXT_SEARCH = "english"

#: Schema 4's vectors: one row per window, keyed by user and vector id.
_VECTOR_TABLE_4 = """CREATE TABLE memory_vectors (
    tenant text NOT NULL,
    user_id text NOT NULL,
    vid bigint NOT NULL,
    embedding vector({dimensions}) NOT NULL,
    PRIMARY KEY (tenant, user_id, vid)
)"""

#: One row per window; a user's vectors are read in order of the primary key.
#: ``floats`` is the same vector as its float32s, big-endian, as pgvector
#: sends them (``vector_send`` without its 4-byte header), computed by
#: PostgreSQL on every write so the two never differ. A user's first search
#: reads ``floats`` (schema 6): kept in the row itself (storage MAIN), it is
#: copied out as it is, where ``embedding`` (stored out of line, in four
#: TOAST chunks of a 1536-d vector) is fetched chunk by chunk and sent one
#: number at a time: 2.6 us of the server's time per 1536-d vector against
#: 9.3 (a COPY of 100,000 of them to /dev/null). pgvector's operators
#: (``<=>``, the search without a cache) read ``embedding``.
VECTOR_TABLE = [
    """CREATE TABLE memory_vectors (
        tenant text NOT NULL,
        user_id text NOT NULL,
        vid bigint NOT NULL,
        embedding vector({dimensions}) NOT NULL,
        floats bytea NOT NULL GENERATED ALWAYS AS (substring(vector_send(embedding) FROM 5)) STORED,
        PRIMARY KEY (tenant, user_id, vid)
    )""",
    # Before any row is written: a row's storage is decided when it is.
    "ALTER TABLE memory_vectors ALTER COLUMN floats SET STORAGE MAIN",
]

MIGRATIONS: dict[int, list[Step]] = {
    4: [
        "CREATE EXTENSION IF NOT EXISTS vector",
        """CREATE TABLE api_keys (
            id text PRIMARY KEY,
            seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            tenant text NOT NULL,
            key_id text NOT NULL UNIQUE,
            name text NOT NULL,
            secret_hash bytea NOT NULL UNIQUE,
            created_at bigint NOT NULL,
            last_used_at bigint,
            revoked_at bigint,
            rate_limit integer,
            concurrency_limit integer
        )""",
        "CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at)",
        """CREATE TABLE memories (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id text NOT NULL UNIQUE,
            tenant text NOT NULL,
            user_id text NOT NULL,
            content text NOT NULL,
            metadata text NOT NULL,
            created_at bigint NOT NULL,
            updated_at bigint NOT NULL,
            expires_at bigint,
            version integer NOT NULL DEFAULT 1,
            first_vid bigint NOT NULL,
            windows integer NOT NULL,
            dedupe_key bytea,
            fts tsvector GENERATED ALWAYS AS (
                to_tsvector('{text_search}', regexp_replace(content, '[[:punct:]]+', ' ', 'g'))
            ) STORED
        )""",
        "CREATE INDEX memories_by_user ON memories (tenant, user_id, created_at DESC, seq DESC)",
        "CREATE INDEX memories_by_user_vid ON memories (tenant, user_id, first_vid)",
        "CREATE INDEX memories_by_dedupe_key ON memories (tenant, user_id, dedupe_key)",
        "CREATE INDEX memories_expiring ON memories (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX memories_fts ON memories USING gin (fts)",
        _VECTOR_TABLE_4,
        """CREATE TABLE memory_history (
            memory_seq bigint NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,
            version integer NOT NULL,
            content text NOT NULL,
            metadata text NOT NULL,
            at bigint NOT NULL,
            PRIMARY KEY (memory_seq, version)
        )""",
        """CREATE TABLE memory_users (
            tenant text NOT NULL,
            user_id text NOT NULL,
            count bigint NOT NULL,
            max_vid bigint NOT NULL,
            deletes bigint NOT NULL,
            updates bigint NOT NULL,
            generation bigint NOT NULL,
            PRIMARY KEY (tenant, user_id)
        )""",
        *LIMITS_SCHEMA,
    ],
    5: [
        # As SQLite's schema 5: users numbered for good, erased with their
        # last memory; the keyword index per user (memsvc.store.postings),
        # replacing the tsvector, so both stores rank keyword matches alike.
        "DELETE FROM memory_users WHERE count = 0",
        "ALTER TABLE memory_users ADD COLUMN user_key bigint GENERATED ALWAYS AS IDENTITY",
        "ALTER TABLE memory_users ADD CONSTRAINT memory_users_key UNIQUE (user_key)",
        "ALTER TABLE memory_users ADD COLUMN terms bigint NOT NULL DEFAULT 0",
        "ALTER TABLE memory_users ADD COLUMN last_write bigint NOT NULL DEFAULT 0",
        """UPDATE memory_users AS u SET last_write = coalesce((SELECT max(updated_at)
            FROM memories AS m WHERE m.tenant = u.tenant AND m.user_id = u.user_id), 0)""",
        # Grows with every erasure: maintenance runs when it moved.
        "CREATE SEQUENCE memsvc_erasures",
        """CREATE TABLE memory_terms (
            user_key bigint NOT NULL,
            term bigint NOT NULL,
            seq bigint NOT NULL,
            tf integer NOT NULL,
            dl integer NOT NULL,
            PRIMARY KEY (user_key, term, seq)
        )""",
        build_postings,
        "ALTER TABLE memories DROP COLUMN fts",
    ],
    6: [
        # Each vector's float32s in the row beside it (see VECTOR_TABLE): the
        # table is made anew, its rows copied over (the old one's space is
        # given back when it is dropped, at the end of the migration).
        "ALTER TABLE memory_vectors RENAME TO memory_vectors_5",
        "ALTER INDEX memory_vectors_pkey RENAME TO memory_vectors_5_pkey",
        *VECTOR_TABLE,
        """INSERT INTO memory_vectors (tenant, user_id, vid, embedding)
            SELECT tenant, user_id, vid, embedding FROM memory_vectors_5""",
        "DROP TABLE memory_vectors_5",
    ],
    7: [*CONVERSATIONS],
    8: [
        # The operator's limits of a key (memsvc keys set-limits) apart from
        # those its tenant chose (keys.setLimits), which may only be lower:
        # until now one pair held both. A pair set before is taken as the
        # operator's, so no tenant gets more than it had.
        "ALTER TABLE api_keys ADD COLUMN rate_ceiling integer",
        "ALTER TABLE api_keys ADD COLUMN concurrency_ceiling integer",
        "UPDATE api_keys SET rate_ceiling = rate_limit, concurrency_ceiling = concurrency_limit",
    ],
    # Extraction: its jobs, the tokens they spend, and versions that no add or update made.
    9: [*JOBS],
}


def vector_table() -> list[str]:
    return list(VECTOR_TABLE)


def render(statement: str, dimensions: int) -> str:
    return statement.replace("{dimensions}", str(int(dimensions))).replace(
        "{text_search}", TEXT_SEARCH
    )


#: Every part of the current schema: (kind, name) as the store lists them
#: (:meth:`~memsvc.store.postgres.store.PgStore._schema_objects`), the indexes
#: of constraints and the sequences of identity columns included.
OBJECTS = frozenset(
    [("extension", "vector"), ("sequence", "memsvc_erasures")]
    + [("table", name) for name in (
        "memsvc_meta", "api_keys", "memories", "memory_history", "memory_users",
        "memory_terms", "memory_vectors", "memory_sessions", *JOB_TABLES,
    )]
    + [("sequence", name) for name in (
        "api_keys_seq_seq", "memories_seq_seq", "memory_users_user_key_seq",
    )]
    + [("index", name) for name in (
        "memsvc_meta_pkey", "api_keys_pkey", "api_keys_seq_key", "api_keys_key_id_key",
        "api_keys_secret_hash_key", "api_keys_by_tenant", "memories_pkey", "memories_id_key",
        "memories_by_user", "memories_by_user_vid", "memories_by_dedupe_key",
        "memories_expiring", "memory_vectors_pkey", "memory_history_pkey",
        "memory_users_pkey", "memory_users_key", "memory_terms_pkey", "memory_sessions_pkey",
        "memory_jobs_pkey", "memory_usage_pkey", "memory_events_pkey",
        *CONVERSATION_INDEXES, *JOB_INDEXES,
    )]
    + [("constraint", "memory_history_memory_seq_fkey")]
    + [("constraint", "memory_events_memory_seq_fkey")]
) | LIMITS_OBJECTS  # fmt: skip
