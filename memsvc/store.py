"""Every SQL statement memsvc runs, behind :class:`Store`.

Memories live in two tables written in one transaction: ``memories`` (the
record) and ``memory_vectors``, a sqlite-vec ``vec0`` table partitioned by
tenant and user, so a search reads only that user's vectors. The two are
joined on ``memories.seq = memory_vectors.rowid``.

Services see only :class:`Store` methods taking and returning plain values
(:mod:`memsvc.models`), so another backend can implement the same methods.
"""

from __future__ import annotations

import contextlib
import json
import os
import typing as t

import numpy as np

from .models import ApiKey
from .models import Memory

SCHEMA_VERSION = 2

# vec0 allocates chunk_size vectors per partition (tenant + user) up front.
# 8 is the smallest it accepts: a user with 3 memories then costs 8 slots
# instead of the default 1024 (6 MB at 1536 dims). Large users span many
# chunks; tests/bench/storage.py measures both cases.
VECTOR_CHUNK_SIZE = 8

# sqlite-vec refuses KNN queries for more rows than this.
_KNN_MAX = 4096

_VECTOR_TABLE = [
    """CREATE VIRTUAL TABLE memory_vectors USING vec0(
            tenant TEXT PARTITION KEY,
            user_id TEXT PARTITION KEY,
            embedding FLOAT[{dimensions}] distance_metric=cosine,
            chunk_size={chunk_size}
        )""",
    # vec0 looks up a partition's chunks with a WHERE on these columns of
    # its shadow table, which has no index of its own: without this one
    # every search and insert scans the chunks of all users.
    "CREATE INDEX memory_vectors_chunks_by_partition "
    "ON memory_vectors_chunks (partition00, partition01)",
]

_MIGRATIONS: dict[int, list[str]] = {
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
        *_VECTOR_TABLE,
    ],
    2: [
        # Per-key overrides of the global request limits (NULL: the default).
        "ALTER TABLE api_keys ADD COLUMN rate_limit INTEGER",
        "ALTER TABLE api_keys ADD COLUMN concurrency_limit INTEGER",
    ],
}

_MEMORY_COLUMNS = "id, tenant, user_id, content, metadata, created_at, updated_at"
_KEY_COLUMNS = (
    "id, tenant, key_id, name, created_at, last_used_at, revoked_at, rate_limit, concurrency_limit"
)


def _memory(row: t.Sequence[t.Any]) -> Memory:
    return Memory(
        id=row[0],
        tenant=row[1],
        user_id=row[2],
        content=row[3],
        metadata=json.loads(row[4]),
        created_at=row[5],
        updated_at=row[6],
    )


def _key(row: t.Sequence[t.Any]) -> ApiKey:
    return ApiKey(*row)


class StoreMismatch(Exception):
    """The database was made for another embedding model or dimension."""


class Store:
    """memsvc's data, in one SQLite file, over one connection."""

    def __init__(self, conn: t.Any):
        self.conn = conn

    # -- transactions -------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> t.Iterator[Store]:
        """A write transaction: all of it is committed, or none of it."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def read(self) -> t.Iterator[Store]:
        """A read transaction: every query in it sees one snapshot."""
        self.conn.execute("BEGIN")
        try:
            yield self
        finally:
            self.conn.execute("COMMIT")

    def reset(self) -> None:
        """Roll back whatever a failed request left open."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    # -- schema -------------------------------------------------------------

    def migrate(self, embedder_id: str, dimensions: int) -> None:
        """Create or upgrade the schema; a new database records the embedder.

        An existing database keeps the embedder it records; see
        :meth:`check_embedder`.
        """
        # WAL lets searches run while a memory is being written. It is a
        # property of the file, so set it before taking the write lock.
        self.conn.execute("PRAGMA journal_mode = WAL")
        with self.write():
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS memsvc_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            version = int(self._meta("schema_version") or 0)
            if version > SCHEMA_VERSION:
                raise StoreMismatch(
                    f"the database has schema version {version}, newer than this memsvc "
                    f"({SCHEMA_VERSION}); upgrade memsvc"
                )
            if version == 0:
                self._set_meta("embedder", embedder_id)
                self._set_meta("dimensions", str(dimensions))
            dimensions = int(self._meta("dimensions"))
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
                    self.conn.execute(
                        statement.format(dimensions=dimensions, chunk_size=VECTOR_CHUNK_SIZE)
                    )
                self._set_meta("schema_version", str(step))

    def embedder(self) -> tuple[str, int] | None:
        """The (model id, dimensions) the stored vectors come from."""
        try:
            model = self._meta("embedder")
            dims = self._meta("dimensions")
        except Exception:
            return None
        if model is None or dims is None:
            return None
        return model, int(dims)

    def check_embedder(self, embedder_id: str, dimensions: int) -> None:
        recorded = self.embedder()
        if recorded is not None and recorded != (embedder_id, dimensions):
            raise StoreMismatch(_mismatch(recorded, (embedder_id, dimensions)))

    def _meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM memsvc_meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO memsvc_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def ping(self) -> None:
        """Read from the database; raises if it cannot be read."""
        # An open connection keeps reading a file that was deleted or
        # replaced under it; check that the path still leads to it.
        (path,) = self.conn.execute(
            "SELECT file FROM pragma_database_list WHERE name = 'main'"
        ).fetchone()
        if path and not os.path.exists(path):
            raise OSError(f"database file {path} no longer exists")
        self.conn.execute("SELECT value FROM memsvc_meta WHERE key = 'schema_version'").fetchone()

    # -- memories -----------------------------------------------------------

    def insert_memory(self, memory: Memory, vector: np.ndarray) -> None:
        """Insert a memory and its vector; call inside :meth:`write`."""
        cur = self.conn.execute(
            f"INSERT INTO memories ({_MEMORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                memory.id,
                memory.tenant,
                memory.user_id,
                memory.content,
                json.dumps(memory.metadata, ensure_ascii=False, separators=(",", ":")),
                memory.created_at,
                memory.updated_at,
            ),
        )
        self.conn.execute(
            "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) VALUES (?, ?, ?, ?)",
            (cur.lastrowid, memory.tenant, memory.user_id, _blob(vector)),
        )

    def get_memory(self, tenant: str, memory_id: str) -> Memory | None:
        row = self.conn.execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = ? AND tenant = ?",
            (memory_id, tenant),
        ).fetchone()
        return _memory(row) if row else None

    def list_memories(self, tenant: str, user_id: str, limit: int) -> list[Memory]:
        """A user's memories, newest first."""
        rows = self.conn.execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
            "ORDER BY created_at DESC, seq DESC LIMIT ?",
            (tenant, user_id, limit),
        ).fetchall()
        return [_memory(row) for row in rows]

    def delete_memory(self, tenant: str, memory_id: str) -> bool:
        """Delete a memory and its vector; call inside :meth:`write`."""
        row = self.conn.execute(
            "DELETE FROM memories WHERE id = ? AND tenant = ? RETURNING seq",
            (memory_id, tenant),
        ).fetchone()
        if row is None:
            return False
        self.conn.execute("DELETE FROM memory_vectors WHERE rowid = ?", (row[0],))
        return True

    def nearest(
        self, tenant: str, user_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[Memory, float]]:
        """The ``k`` memories of a user nearest to ``vector``, with cosine distances.

        Ordered by distance, then newest first. Rows tied with the k-th at
        the cut are all considered before the cut is made, so which of two
        equally near memories is returned does not depend on storage order.
        """
        blob = _blob(vector)
        fetch = k + 1
        while True:
            rows = self.conn.execute(
                f"""WITH knn AS (
                    SELECT rowid, distance FROM memory_vectors
                    WHERE embedding MATCH ? AND k = ? AND tenant = ? AND user_id = ?
                )
                SELECT {", ".join("m." + c.strip() for c in _MEMORY_COLUMNS.split(","))},
                       knn.distance
                FROM knn JOIN memories AS m ON m.seq = knn.rowid
                ORDER BY knn.distance, m.created_at DESC, m.seq DESC""",
                (blob, fetch, tenant, user_id),
            ).fetchall()
            # A tie across the cut means a row just past it might sort
            # before one inside it; fetch more until the cut is clean.
            if len(rows) < fetch or rows[k - 1][7] != rows[-1][7] or fetch == _KNN_MAX:
                break
            fetch = min(fetch * 2, _KNN_MAX)
        return [(_memory(row), row[7]) for row in rows[:k]]

    # -- API keys -----------------------------------------------------------

    def insert_key(self, key: ApiKey, secret_hash: bytes) -> None:
        self.conn.execute(
            f"INSERT INTO api_keys ({_KEY_COLUMNS}, secret_hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key.id,
                key.tenant,
                key.key_id,
                key.name,
                key.created_at,
                key.last_used_at,
                key.revoked_at,
                key.rate_limit,
                key.concurrency_limit,
                secret_hash,
            ),
        )

    def key_by_hash(self, secret_hash: bytes) -> ApiKey | None:
        row = self.conn.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?", (secret_hash,)
        ).fetchone()
        return _key(row) if row else None

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self.conn.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)
        ).fetchone()
        return _key(row) if row else None

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """A tenant's keys, or every key when ``tenant`` is None, oldest first."""
        if tenant is None:
            rows = self.conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY tenant, created_at, rowid"
            ).fetchall()
        else:
            rows = self.conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE tenant = ? ORDER BY created_at, rowid",
                (tenant,),
            ).fetchall()
        return [_key(row) for row in rows]

    def revoke_key(self, key_id: str, now: int) -> None:
        """Mark a key revoked; a key already revoked keeps its first time."""
        self.conn.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (now, key_id),
        )

    def set_key_limits(
        self, key_id: str, rate_limit: int | None, concurrency_limit: int | None
    ) -> bool:
        cur = self.conn.execute(
            "UPDATE api_keys SET rate_limit = ?, concurrency_limit = ? WHERE id = ?",
            (rate_limit, concurrency_limit, key_id),
        )
        return cur.rowcount == 1

    def touch_key(self, key_id: str, now: int) -> None:
        self.conn.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (now, key_id))

    # -- re-embedding -------------------------------------------------------
    # New vectors are staged in a plain table, batch by batch, each batch
    # committed: an interrupted run resumes where it stopped, and memory use
    # stays one batch. The switch to them is one transaction at the end.

    def start_reembed(self, embedder_id: str) -> None:
        with self.write():
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS reembed_staging "
                "(seq INTEGER PRIMARY KEY, embedder TEXT NOT NULL, embedding BLOB NOT NULL)"
            )
            # Vectors staged for another model by an earlier run are useless.
            self.conn.execute("DELETE FROM reembed_staging WHERE embedder != ?", (embedder_id,))

    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        """(seq, content) of memories with no staged vector yet, oldest first."""
        return self.conn.execute(
            "SELECT seq, content FROM memories "
            "WHERE seq > (SELECT coalesce(max(seq), 0) FROM reembed_staging) "
            "ORDER BY seq LIMIT ?",
            (limit,),
        ).fetchall()

    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        with self.write():
            self.conn.executemany(
                "INSERT OR REPLACE INTO reembed_staging (seq, embedder, embedding) "
                "VALUES (?, ?, ?)",
                [(seq, embedder_id, _blob(vector)) for seq, vector in rows],
            )

    def finish_reembed(self, embedder_id: str, dimensions: int) -> bool:
        """Replace every vector by its staged one; False if memories arrived meanwhile."""
        with self.write():
            if self.unstaged_memories(1):
                return False
            self.conn.execute("DROP TABLE memory_vectors")
            for statement in _VECTOR_TABLE:
                self.conn.execute(
                    statement.format(dimensions=dimensions, chunk_size=VECTOR_CHUNK_SIZE)
                )
            self.conn.execute(
                "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) "
                "SELECT m.seq, m.tenant, m.user_id, s.embedding "
                "FROM reembed_staging AS s JOIN memories AS m ON m.seq = s.seq ORDER BY m.seq"
            )
            self._set_meta("embedder", embedder_id)
            self._set_meta("dimensions", str(dimensions))
            self.conn.execute("DROP TABLE reembed_staging")
        return True


def _blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def _mismatch(recorded: tuple[str, int], configured: tuple[str, int]) -> str:
    return (
        f"the database holds vectors from {recorded[0]} ({recorded[1]} dimensions) but the "
        f"configured embedder is {configured[0]} ({configured[1]} dimensions); switch back with "
        "MEMSVC_EMBEDDER / MEMSVC_EMBEDDING_MODEL / MEMSVC_EMBEDDING_DIMENSIONS, or run "
        "'memsvc reembed' to re-embed every memory with the configured one"
    )
