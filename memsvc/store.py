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
from .similarity import rank
from .similarity import scan_complete

SCHEMA_VERSION = 3

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


class UserState(t.NamedTuple):
    """A user's change counters; any write to their memories changes them."""

    count: int
    max_seq: int
    deletes: int
    generation: int


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

    def nearest(
        self, tenant: str, user_id: str, vector: np.ndarray, k: int, threshold: float
    ) -> list[tuple[Memory, float]]:
        """A user's ``k`` memories most similar to ``vector``, with similarity >= ``threshold``.

        Exact (see :mod:`memsvc.similarity`): sqlite-vec's KNN nominates
        candidates in float32, fetching more until no memory past the last
        one fetched could still make the cut, and they are ranked in
        float64. Returns ``(memory, similarity)``, most similar first, ties
        to the newest.
        """
        blob = _blob(vector)
        fetch = min(k + 16, _KNN_MAX)
        while True:
            rows = self.conn.execute(
                "SELECT rowid, distance, embedding FROM memory_vectors "
                "WHERE embedding MATCH ? AND k = ? AND tenant = ? AND user_id = ?",
                (blob, fetch, tenant, user_id),
            ).fetchall()
            if len(rows) < fetch:
                break
            if scan_complete(1 - rows[k - 1][1], 1 - rows[-1][1], threshold):
                break
            if fetch == _KNN_MAX:
                # Thousands of near-ties: more than a KNN query returns.
                seqs, _, vectors = self.user_vectors(tenant, user_id)
                return self._ranked(seqs, vectors, vector, k, threshold)
            fetch = min(fetch * 4, _KNN_MAX)
        if not rows:
            return []
        seqs = np.array([row[0] for row in rows], dtype=np.int64)
        vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
        return self._ranked(seqs, vectors.reshape(len(rows), -1), vector, k, threshold)

    def _ranked(
        self, seqs: np.ndarray, vectors: np.ndarray, query: np.ndarray, k: int, threshold: float
    ) -> list[tuple[Memory, float]]:
        if len(seqs) == 0:
            return []
        created = self._created(seqs)
        best = rank(vectors, seqs, created, query, k, threshold)
        found = self.memories_by_seq([seq for seq, _ in best])
        return [(found[seq], similarity) for seq, similarity in best if seq in found]

    def _created(self, seqs: np.ndarray) -> np.ndarray:
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
            vectors = self._vector_chunks(tenant, user_id, seqs[:n], spare)
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

    def _vector_chunks(self, tenant: str, user_id: str, seqs: np.ndarray, spare: int) -> np.ndarray:
        """The vectors of ``seqs`` (ascending), read from vec0's chunk tables.

        A chunk row holds a validity bitmap (bit i little-endian: slot i is
        in use), the slots' rowids (int64) and, in the vector chunk table,
        the slots' vectors (float32) back to back; the layout is checked
        against vec0's own answers by the tests. Each chunk is copied
        straight into its rows of one array: no intermediate copies.
        """
        cursor = self.conn.execute(
            # vec0 declares a column named "rowid" in this table, which hides
            # the real rowid (the chunk id) unless it is called _rowid_; a
            # join on the column would scan every vector chunk.
            "SELECT c.validity, c.rowids, v.vectors "
            "FROM memory_vectors_chunks AS c "
            "JOIN memory_vectors_vector_chunks00 AS v ON v._rowid_ = c.chunk_id "
            "WHERE c.partition00 = ? AND c.partition01 = ?",
            (tenant, user_id),
        )
        n = len(seqs)
        out: np.ndarray | None = None
        filled = 0
        for validity, rowids, blob in cursor:
            ids = np.frombuffer(rowids, dtype=np.int64)
            valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            valid = valid[: len(ids)].astype(bool)
            if not valid.any():
                continue
            vecs = np.frombuffer(blob, dtype=np.float32).reshape(len(ids), -1)
            if out is None:
                out = np.zeros((n + spare, vecs.shape[1]), dtype=np.float32)
            where = np.searchsorted(seqs, ids[valid])
            out[where] = vecs[valid]
            filled += len(where)
        if out is None or filled != n:
            raise RuntimeError(f"vectors of {tenant}/{user_id}: found {filled} of {n}")
        return out

    def user_seqs(self, tenant: str, user_id: str) -> np.ndarray:
        """The seqs of a user's memories, ascending."""
        rows = self.conn.execute(
            "SELECT seq FROM memories WHERE tenant = ? AND user_id = ? ORDER BY seq",
            (tenant, user_id),
        ).fetchall()
        return np.array([row[0] for row in rows], dtype=np.int64)

    # -- backups ------------------------------------------------------------

    def backup(self, path: str) -> dict[str, int]:
        """Copy the whole database to ``path``, consistently, while it is in use.

        SQLite's online backup copies every page in one step inside one
        read transaction: a snapshot of one moment, taken without stopping
        writers (WAL lets them go on). The copy is written beside ``path``,
        checked, flushed to disk, and only then renamed into place.
        """
        from .db import driver

        tmp = f"{path}.partial"
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            if os.path.exists(leftover):
                os.remove(leftover)
        dest = driver().connect(tmp, isolation_level=None)
        try:
            self.conn.backup(dest, pages=-1)
            (check,) = dest.execute("PRAGMA integrity_check").fetchone()
            if check != "ok":
                raise RuntimeError(f"the copy failed its integrity check: {check}")
            counts = {
                "memories": dest.execute("SELECT count(*) FROM memories").fetchone()[0],
                "api_keys": dest.execute("SELECT count(*) FROM api_keys").fetchone()[0],
            }
            dest.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        finally:
            dest.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        counts["bytes"] = os.path.getsize(path)
        return counts

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
            # Every vector changed: caches of any user must reload.
            self.conn.execute("UPDATE memory_users SET generation = generation + 1")
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
