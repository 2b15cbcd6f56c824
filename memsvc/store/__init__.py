"""Every SQL statement memsvc runs, behind :class:`Store`.

Memories live in two tables written in one transaction: ``memories`` (the
record) and ``memory_vectors``, a sqlite-vec ``vec0`` table partitioned by
tenant and user, so a search reads only that user's vectors. The two are
joined on ``memories.seq = memory_vectors.rowid``.

Services see only :class:`Store` methods taking and returning plain values
(:mod:`memsvc.models`), and open the transactions themselves
(:meth:`Store.write`, :meth:`Store.read`); the methods never commit. The
schema lives in :mod:`.schema`, what memsvc knows of vec0's storage in
:mod:`.vec0`, backups in :mod:`.backup`, connections in :mod:`.db`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import typing as t

import numpy as np

from ..models import ApiKey
from ..models import Memory
from . import schema
from . import vec0
from .db import Database
from .db import connect
from .schema import SCHEMA_VERSION
from .schema import StoreMismatch

__all__ = ["Database", "SCHEMA_VERSION", "Store", "StoreMismatch", "UserState", "connect"]

_MEMORY_COLUMNS = "id, tenant, user_id, content, metadata, created_at, updated_at"
_KEY_COLUMNS = (
    "id, tenant, key_id, name, created_at, last_used_at, revoked_at, rate_limit, concurrency_limit"
)

_savepoints = itertools.count()


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


@dataclasses.dataclass(frozen=True, slots=True)
class UserState:
    """A user's change counters; any write to their memories changes them."""

    count: int
    max_seq: int
    deletes: int
    generation: int


class Store:
    """memsvc's data, in one SQLite file, over one connection."""

    def __init__(self, conn: t.Any):
        self.conn = conn

    # -- transactions -------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> t.Iterator[Store]:
        """A write transaction: all of it is committed, or none of it.

        Inside another transaction it is a savepoint: its own part is undone
        on error, and the outer transaction decides about the rest.
        """
        if self.conn.in_transaction:
            name = f"sp{next(_savepoints)}"
            self.conn.execute(f"SAVEPOINT {name}")
            try:
                yield self
            except BaseException:
                self.conn.execute(f"ROLLBACK TO {name}")
                self.conn.execute(f"RELEASE {name}")
                raise
            self.conn.execute(f"RELEASE {name}")
            return
        # IMMEDIATE: take the write lock up front, so a writer waits for it
        # (busy_timeout) rather than failing half-way.
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
        if self.conn.in_transaction:
            yield self
            return
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
        """Create or upgrade the schema (see :mod:`.schema`), in its own transaction."""
        # WAL lets searches run while a memory is being written. It is a
        # property of the file, so set it before taking the write lock.
        self.conn.execute("PRAGMA journal_mode = WAL")
        with self.write():
            schema.migrate(self.conn, embedder_id, dimensions)

    def embedder(self) -> tuple[str, int] | None:
        """The (model id, dimensions) the stored vectors come from."""
        return schema.recorded_embedder(self.conn)

    def check_embedder(self, embedder_id: str, dimensions: int) -> None:
        schema.check_embedder(self.conn, embedder_id, dimensions)

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

    def insert_memories(self, memories: t.Sequence[Memory], vectors: np.ndarray) -> None:
        """Insert memories and their vectors; call inside :meth:`write`.

        Memories get increasing ``seq`` in the order given. Vectors go in
        grouped by user, which is how vec0 inserts fastest.
        """
        if len(memories) == 0:
            return
        (last,) = self.conn.execute(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0)"
        ).fetchone()
        seqs = range(last + 1, last + 1 + len(memories))
        self.conn.executemany(
            f"INSERT INTO memories (seq, {_MEMORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    seq,
                    m.id,
                    m.tenant,
                    m.user_id,
                    m.content,
                    json.dumps(m.metadata, ensure_ascii=False, separators=(",", ":")),
                    m.created_at,
                    m.updated_at,
                )
                for seq, m in zip(seqs, memories, strict=True)
            ],
        )
        order = sorted(
            range(len(memories)), key=lambda i: (memories[i].tenant, memories[i].user_id)
        )
        self.conn.executemany(
            "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) VALUES (?, ?, ?, ?)",
            [(seqs[i], memories[i].tenant, memories[i].user_id, _blob(vectors[i])) for i in order],
        )
        users: dict[tuple[str, str], list[int]] = {}
        for seq, m in zip(seqs, memories, strict=True):
            users.setdefault((m.tenant, m.user_id), []).append(seq)
        self.conn.executemany(
            "INSERT INTO memory_users (tenant, user_id, count, max_seq, deletes, generation) "
            "VALUES (?, ?, ?, ?, 0, 0) ON CONFLICT (tenant, user_id) DO UPDATE SET "
            "count = count + excluded.count, max_seq = max(max_seq, excluded.max_seq)",
            [(tenant, user, len(s), max(s)) for (tenant, user), s in users.items()],
        )

    def insert_memory(self, memory: Memory, vector: np.ndarray) -> None:
        """Insert a memory and its vector; call inside :meth:`write`."""
        self.insert_memories([memory], np.asarray(vector)[None, :])

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
            "DELETE FROM memories WHERE id = ? AND tenant = ? RETURNING seq, user_id",
            (memory_id, tenant),
        ).fetchone()
        if row is None:
            return False
        seq, user_id = row
        self.conn.execute("DELETE FROM memory_vectors WHERE rowid = ?", (seq,))
        self.conn.execute(
            "UPDATE memory_users SET count = count - 1, deletes = deletes + 1 "
            "WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        )
        return True

    def knn(
        self, tenant: str, user_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float, bytes]]:
        """sqlite-vec's ``k`` nearest of a user's vectors: ``(seq, cosine distance, vector)``.

        Float32 arithmetic, at most :data:`vec0.KNN_MAX` rows; ranking them
        exactly is :mod:`memsvc.search`'s work.
        """
        return self.conn.execute(
            "SELECT rowid, distance, embedding FROM memory_vectors "
            "WHERE embedding MATCH ? AND k = ? AND tenant = ? AND user_id = ?",
            (_blob(vector), k, tenant, user_id),
        ).fetchall()

    def created_of(self, seqs: t.Sequence[int] | np.ndarray) -> np.ndarray:
        """The ``created_at`` of each of ``seqs`` (0 for one that is gone)."""
        marks = ",".join("?" * len(seqs))
        times = dict(
            self.conn.execute(
                f"SELECT seq, created_at FROM memories WHERE seq IN ({marks})",
                [int(x) for x in seqs],
            ).fetchall()
        )
        return np.array([times.get(int(x), 0) for x in seqs], dtype=np.int64)

    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        if not seqs:
            return {}
        marks = ",".join("?" * len(seqs))
        rows = self.conn.execute(
            f"SELECT seq, {_MEMORY_COLUMNS} FROM memories WHERE seq IN ({marks})", list(seqs)
        ).fetchall()
        return {row[0]: _memory(row[1:]) for row in rows}

    # -- bulk reads for a search cache -------------------------------------------

    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        """The user's change counters (see the ``memory_users`` table)."""
        row = self.conn.execute(
            "SELECT count, max_seq, deletes, generation FROM memory_users "
            "WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        ).fetchone()
        return UserState(*row) if row else None

    def user_vectors(
        self, tenant: str, user_id: str, after_seq: int = 0, spare: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(seqs, created_at, vectors)`` of a user's memories with seq > ``after_seq``.

        Rows are in seq order. ``spare`` extra rows, zeroed, are allocated at
        the end of each array, for a caller that will append to them.
        Everything (``after_seq`` 0) is read a chunk at a time straight from
        vec0's storage, one blob per 8 vectors, into one array; a few new
        memories are read one by one.
        """
        index = self.conn.execute(
            "SELECT seq, created_at FROM memories WHERE tenant = ? AND user_id = ? AND seq > ? "
            "ORDER BY seq",
            (tenant, user_id, after_seq),
        ).fetchall()
        n = len(index)
        seqs = np.zeros(n + spare, dtype=np.int64)
        created = np.zeros(n + spare, dtype=np.int64)
        if n == 0:
            return seqs, created, np.zeros((spare, 0), dtype=np.float32)
        seqs[:n] = [row[0] for row in index]
        created[:n] = [row[1] for row in index]
        if after_seq == 0 or n > 256:
            vectors = vec0.read_vectors(self.conn, tenant, user_id, seqs[:n], spare)
        else:
            blobs = [
                self.conn.execute(
                    "SELECT embedding FROM memory_vectors WHERE rowid = ?", (int(seq),)
                ).fetchone()[0]
                for seq in seqs[:n]
            ]
            found = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(n, -1)
            vectors = np.zeros((n + spare, found.shape[1]), dtype=np.float32)
            vectors[:n] = found
        return seqs, created, vectors

    def user_seqs(self, tenant: str, user_id: str) -> np.ndarray:
        """The seqs of a user's memories, ascending."""
        rows = self.conn.execute(
            "SELECT seq FROM memories WHERE tenant = ? AND user_id = ? ORDER BY seq",
            (tenant, user_id),
        ).fetchall()
        return np.array([row[0] for row in rows], dtype=np.int64)

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
        self.conn.executemany(
            "INSERT OR REPLACE INTO reembed_staging (seq, embedder, embedding) VALUES (?, ?, ?)",
            [(seq, embedder_id, _blob(vector)) for seq, vector in rows],
        )

    def has_unstaged(self) -> bool:
        return bool(self.unstaged_memories(1))

    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        """Replace every vector by its staged one and record the new model."""
        self.conn.execute("DROP TABLE memory_vectors")
        for statement in vec0.TABLE:
            self.conn.execute(vec0.render(statement, dimensions))
        self.conn.execute(
            "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) "
            "SELECT m.seq, m.tenant, m.user_id, s.embedding "
            "FROM reembed_staging AS s JOIN memories AS m ON m.seq = s.seq ORDER BY m.seq"
        )
        schema.set_meta(self.conn, "embedder", embedder_id)
        schema.set_meta(self.conn, "dimensions", str(dimensions))
        self.conn.execute("DROP TABLE reembed_staging")
        # Every vector changed: caches of any user must reload.
        self.conn.execute("UPDATE memory_users SET generation = generation + 1")


def _blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()
