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

import typing as t

from .. import postings
from ..schema import SCHEMA_VERSION
from ..schema import StoreMismatch
from .limits import SCHEMA as LIMITS_SCHEMA

#: The first schema version a PostgreSQL database can have.
FIRST_VERSION = 4

#: Schema 4's text search configuration (its keyword index, until schema 5).
TEXT_SEARCH = "english"

#: One row per window; a user's vectors are read in order of the primary key.
VECTOR_TABLE = [
    """CREATE TABLE memory_vectors (
        tenant text NOT NULL,
        user_id text NOT NULL,
        vid bigint NOT NULL,
        embedding vector({dimensions}) NOT NULL,
        PRIMARY KEY (tenant, user_id, vid)
    )""",
]

Step = str | t.Callable[[t.Any], None]


def _build_postings(conn: t.Any) -> None:
    """Schema 5: every memory's terms into ``memory_terms``, a user at a time."""
    users = conn.execute("SELECT user_key, tenant, user_id FROM memory_users").fetchall()
    for user_key, tenant, user_id in users:
        rows = conn.execute(
            "SELECT seq, content FROM memories WHERE tenant = %s AND user_id = %s",
            (tenant, user_id),
        ).fetchall()
        found = postings.of([(user_key, seq, content) for seq, content in rows])
        with conn.cursor() as cur:
            cur.executemany(postings.INSERT, found.rows)
        conn.execute(
            "UPDATE memory_users SET terms = %s WHERE user_key = %s",
            (found.totals.get(user_key, 0), user_key),
        )


_MIGRATIONS: dict[int, list[Step]] = {
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
        *VECTOR_TABLE,
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
        _build_postings,
        "ALTER TABLE memories DROP COLUMN fts",
    ],
}


def vector_table() -> list[str]:
    return list(VECTOR_TABLE)


def render(statement: str, dimensions: int) -> str:
    return statement.replace("{dimensions}", str(int(dimensions))).replace(
        "{text_search}", TEXT_SEARCH
    )


def migrate(conn: t.Any, embedder_id: str, dimensions: int) -> None:
    """Create or upgrade the schema; a new database records the embedder.

    Call inside a transaction. Two processes starting at once are
    serialised by an advisory lock, so one creates and the other finds.
    """
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('memsvc-migrate', 0))")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS memsvc_meta (key text PRIMARY KEY, value text NOT NULL)"
    )
    version = int(get_meta(conn, "schema_version") or 0)
    if version > SCHEMA_VERSION:
        raise StoreMismatch(
            f"the database has schema version {version}, newer than this memsvc "
            f"({SCHEMA_VERSION}); upgrade memsvc"
        )
    if version == 0:
        set_meta(conn, "embedder", embedder_id)
        set_meta(conn, "dimensions", str(dimensions))
        version = FIRST_VERSION - 1
    recorded_dims = int(get_meta(conn, "dimensions") or dimensions)
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in _MIGRATIONS[step]:
            if callable(statement):
                statement(conn)
            else:
                conn.execute(render(statement, recorded_dims))
        set_meta(conn, "schema_version", str(step))


def recorded_embedder(conn: t.Any) -> tuple[str, int] | None:
    """The (model id, dimensions) the stored vectors come from."""
    exists = conn.execute("SELECT to_regclass('memsvc_meta') IS NOT NULL").fetchone()[0]
    if not exists:
        return None
    model = get_meta(conn, "embedder")
    dims = get_meta(conn, "dimensions")
    if model is None or dims is None:
        return None
    return model, int(dims)


def get_meta(conn: t.Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM memsvc_meta WHERE key = %s", (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: t.Any, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO memsvc_meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )
