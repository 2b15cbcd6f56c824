"""The SQLite store: :class:`SqliteStore`, memsvc's data over one connection to its file.

What it shares with PostgreSQL's is :class:`~memsvc.store.sql.SqlStore`'s;
here is what SQLite does its own way: vectors in a sqlite-vec ``vec0``
table (:mod:`.vec0`) with ids from one counter in ``memsvc_meta``, one
writer at a time, the WAL checkpoints that make erased bytes unrecoverable.
"""

from __future__ import annotations

import contextlib
import os
import typing as t

import numpy as np

from ...models import Memory
from ..sql import Cursor
from ..sql import SqlStore
from ..sql import windows_of
from ..vector_source import ENTRY_COLUMNS
from ..vector_source import Entry
from . import schema
from . import vec0
from .connection import Connection


class SqliteStore(SqlStore):
    """memsvc's data in one SQLite file, over one connection."""

    kind = "SQLite"
    knn_max = vec0.KNN_MAX

    _MIGRATIONS = schema.MIGRATIONS
    _FIRST_VERSION = 1
    _OBJECTS = schema.OBJECTS
    # IMMEDIATE: take the write lock up front, so a writer waits for it
    # (busy_timeout) rather than failing half-way.
    _BEGIN_WRITE = "BEGIN IMMEDIATE"
    _BEGIN_READ = "BEGIN"
    _GREATEST = "max"
    _LEAST = "min"
    _KEY_ORDER = "rowid"
    _BY_EXPIRY = " INDEXED BY memories_expiring"
    _STAGING_TABLE = (
        "CREATE TABLE IF NOT EXISTS reembed_staging (seq INTEGER NOT NULL, "
        "window INTEGER NOT NULL, embedder TEXT NOT NULL, embedding BLOB NOT NULL, "
        "PRIMARY KEY (seq, window))"
    )

    def __init__(self, conn: Connection):
        self.conn = conn

    # -- what SQLite says in its own way ---------------------------------------------

    def _execute(self, query: str, params: t.Sequence[t.Any] | None = None) -> Cursor:
        return self.conn.execute(query, params or ())

    def _many(self, query: str, rows: t.Iterable[t.Sequence[t.Any]]) -> None:
        self.conn.executemany(query, rows)

    def _any(self, column: str, values: t.Sequence[t.Any]) -> list[tuple[str, list[t.Any]]]:
        # One ? per value, 500 values a query.
        return [
            (f"{column} IN ({','.join('?' * len(chunk))})", chunk)
            for chunk in (list(values[i : i + 500]) for i in range(0, len(values), 500))
        ]

    def _has_table(self, name: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    def _schema_objects(self) -> set[tuple[str, str]]:
        return set(self.conn.execute("SELECT type, name FROM sqlite_master").fetchall())

    def _vector(self, vector: np.ndarray) -> bytes:
        return _blob(vector)

    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    # -- schema and health -------------------------------------------------------------

    def migrate(self, embedder_id: str, dimensions: int) -> None:
        # WAL lets searches run while a memory is being written. It is a
        # property of the file, so set it before taking the write lock.
        self.conn.execute("PRAGMA journal_mode = WAL")
        super().migrate(embedder_id, dimensions)

    def _render(self, statement: str, dimensions: int) -> str:
        return vec0.render(statement, dimensions)

    def probe_write(self) -> None:
        """Write and roll back, to learn whether the database takes writes at all.

        A write already under way elsewhere is fine: the database is busy,
        not broken, so a busy lock is not waited for.
        """
        (busy_timeout,) = self.conn.execute("PRAGMA busy_timeout").fetchone()
        self.conn.execute("PRAGMA busy_timeout = 0")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except Exception as e:
            if "locked" in str(e).lower() or "busy" in str(e).lower():
                return
            raise
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout)}")
        try:
            self._set_meta("health", "")
        finally:
            self.conn.execute("ROLLBACK")

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file and empty it; False if a reader was in the way.

        With ``secure_delete`` on, bytes of deleted rows are then gone from
        both files. Never waits: a checkpoint that empties the WAL must have
        every reader on the newest snapshot, and while it waits for them no
        writer may start, so a long read would stall every tenant's writes.
        It first copies what it can without blocking anyone, then empties
        the WAL only if nobody is in the way; if someone is, the caller
        tries again later.
        """
        self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        (busy_timeout,) = self.conn.execute("PRAGMA busy_timeout").fetchone()
        self.conn.execute("PRAGMA busy_timeout = 0")
        try:
            (busy, _, _) = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except Exception as e:
            if "locked" in str(e).lower() or "busy" in str(e).lower():
                return False
            raise
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout)}")
        return busy == 0

    def refresh_statistics(self) -> None:
        # memsvc's SQLite queries are planned by their indexes alone; the
        # statistics ANALYZE gathers would change no plan memsvc relies on.
        return None

    #: The page cache while a connection imports (KiB; SQLite's default is 2 MiB).
    _LOADING_CACHE_KB = 256 * 1024

    @contextlib.contextmanager
    def loading(self) -> t.Iterator[None]:
        """A page cache of 256 MiB while importing, the connection's own again after.

        A batch's rows land all over the indexes (ids are random, users
        interleaved): with the default cache of 2 MiB, pages changed early in
        a transaction are pushed out to the WAL before the commit writes
        them again, and read back in between.
        """
        (was,) = self.conn.execute("PRAGMA cache_size").fetchone()
        self.conn.execute(f"PRAGMA cache_size = -{self._LOADING_CACHE_KB}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA cache_size = {int(was)}")

    def erasures(self) -> int:
        """A number that grows whenever a memory is deleted or replaced, in any process."""
        return int(self._get_meta("erasures") or 0)

    def _erased(self) -> None:
        self.conn.execute(
            "UPDATE memsvc_meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'erasures'"
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
        super().ping()

    # -- memories: writes ------------------------------------------------------
    # Call inside write(); vectors[i] holds memory i's windows, one row each.

    def _new_vids(self, count: int) -> int:
        """Reserve ``count`` consecutive vector ids, never handed out before."""
        first = int(self._get_meta("next_vid") or 1)
        self._set_meta("next_vid", str(first + count))
        return first

    def insert_memories(
        self, memories: t.Sequence[Memory], vectors: t.Sequence[np.ndarray] | np.ndarray
    ) -> list[int]:
        """Insert memories with their vectors and keyword index rows.

        Vector ids come from the database's one counter; vectors go in
        grouped by user, which is how vec0 inserts fastest.
        """
        if len(memories) == 0:
            return []
        vectors, windows = windows_of(memories, vectors)
        (last,) = self.conn.execute(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0)"
        ).fetchone()
        seqs = range(last + 1, last + 1 + len(memories))
        vid = self._new_vids(sum(windows))
        first_vids = []
        for w in windows:
            first_vids.append(vid)
            vid += w
        self._insert_records(seqs, memories, first_vids, windows)
        order = sorted(
            range(len(memories)), key=lambda i: (memories[i].tenant, memories[i].user_id)
        )
        self.conn.executemany(
            "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) VALUES (?, ?, ?, ?)",
            [
                (first_vids[i] + w, memories[i].tenant, memories[i].user_id, _blob(row))
                for i in order
                for w, row in enumerate(vectors[i])
            ],
        )
        users: dict[tuple[str, str], list[int]] = {}
        for i, m in enumerate(memories):
            users.setdefault((m.tenant, m.user_id), []).append(i)
        user_keys = {}
        for (tenant, user), members in users.items():
            (user_keys[tenant, user],) = self.conn.execute(
                "INSERT INTO memory_users (tenant, user_id, count, max_vid, deletes, updates, "
                "generation, last_write) VALUES (?, ?, ?, ?, 0, 0, 0, ?) "
                "ON CONFLICT (tenant, user_id) DO UPDATE SET count = count + excluded.count, "
                "max_vid = max(max_vid, excluded.max_vid), "
                "last_write = max(last_write, excluded.last_write) RETURNING user_key",
                (
                    tenant, user, len(members),
                    max(first_vids[i] + windows[i] - 1 for i in members),
                    max(memories[i].updated_at for i in members),
                ),
            ).fetchone()  # fmt: skip
        self._index(
            (user_keys[m.tenant, m.user_id], seq, m.content)
            for seq, m in zip(seqs, memories, strict=True)
        )
        return list(seqs)

    def _replace_vectors(
        self,
        tenant: str,
        user_id: str,
        user_key: int,
        first_vid: int,
        windows: int,
        vectors: np.ndarray,
    ) -> int:
        self._delete_vectors(tenant, user_id, first_vid, windows)
        new_first = self._new_vids(len(vectors))
        self.conn.executemany(
            "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) VALUES (?, ?, ?, ?)",
            [(new_first + w, tenant, user_id, _blob(row)) for w, row in enumerate(vectors)],
        )
        self.conn.execute(
            "UPDATE memory_users SET deletes = deletes + 1, max_vid = max(max_vid, ?) "
            "WHERE user_key = ?",
            (new_first + len(vectors) - 1, user_key),
        )
        return new_first

    def _delete_vectors(self, tenant: str, user_id: str, first_vid: int, windows: int) -> None:
        self.conn.executemany(
            "DELETE FROM memory_vectors WHERE rowid = ?",
            [(vid,) for vid in range(first_vid, first_vid + windows)],
        )

    def _user_erased(self, tenant: str, user_id: str) -> None:
        # vec0 keeps a partition's emptied chunks, which hold the ids, unless told.
        vec0.erase_partition(self.conn, tenant, user_id)

    def _erase_user_vectors(self, tenant: str, user_id: str) -> int:
        return vec0.erase_partition(self.conn, tenant, user_id)

    # -- memories: reads -------------------------------------------------------

    def _before(self, created_at: int, seq: int) -> tuple[str, list[t.Any]]:
        return "(created_at < ? OR (created_at = ? AND seq < ?))", [created_at, created_at, seq]

    def versions_size(self, seq: int) -> int:
        """Bytes of text and metadata of a memory's earlier versions, without reading them."""
        (n,) = self.conn.execute(
            "SELECT coalesce(sum(length(CAST(content AS BLOB)) + length(CAST(metadata AS BLOB)) "
            "+ 100), 0) FROM memory_history WHERE memory_seq = ?",
            (seq,),
        ).fetchone()
        return int(n)

    # -- search ----------------------------------------------------------------

    def owners(self, tenant: str, user_id: str, vids: t.Sequence[int]) -> dict[int, Entry]:
        """The memory each of ``vids`` belongs to (a vid with no memory left is absent)."""
        # Most memories have one vector, found by its first id at once.
        found = {e.first_vid: e for e in self._entries_in(tenant, user_id, "first_vid", vids)}
        for vid in vids:
            if int(vid) in found:
                continue
            row = self.conn.execute(
                f"SELECT {ENTRY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                "AND first_vid <= ? ORDER BY first_vid DESC LIMIT 1",
                (tenant, user_id, int(vid)),
            ).fetchone()
            if row is not None and vid < row[1] + row[2]:
                found[int(vid)] = Entry(*row)
        return found

    def knn(
        self, tenant: str, user_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float, bytes]]:
        """sqlite-vec's ``k`` nearest of a user's vectors: ``(vid, cosine distance, vector)``.

        Float32 arithmetic, at most :data:`vec0.KNN_MAX` rows; ranking them
        exactly is :mod:`memsvc.search`'s work.
        """
        return self.conn.execute(
            "SELECT rowid, distance, embedding FROM memory_vectors "
            "WHERE embedding MATCH ? AND k = ? AND tenant = ? AND user_id = ?",
            (_blob(vector), k, tenant, user_id),
        ).fetchall()

    def vectors(
        self, tenant: str, user_id: str, vids: np.ndarray, spare: int = 0, whole_user: bool = False
    ) -> np.ndarray:
        """The vectors with ids ``vids`` (ascending) of one user, plus ``spare`` zero rows.

        ``whole_user``: ``vids`` are all of the user's vectors, read a chunk
        at a time straight from vec0's storage; otherwise one by one.
        """
        if whole_user or len(vids) > 256:
            order = np.argsort(vids, kind="stable")
            if whole_user or np.array_equal(order, np.arange(len(vids))):
                return vec0.read_vectors(
                    self.conn, tenant, user_id, vids, spare, subset=not whole_user
                )
            sorted_rows = vec0.read_vectors(self.conn, tenant, user_id, vids[order], subset=True)
            out = np.zeros((len(vids) + spare, sorted_rows.shape[1]), dtype=np.float32)
            out[order] = sorted_rows
            return out
        blobs = [
            self.conn.execute(
                "SELECT embedding FROM memory_vectors WHERE rowid = ?", (int(vid),)
            ).fetchone()[0]
            for vid in vids
        ]
        if not blobs:
            return np.zeros((spare, 0), dtype=np.float32)
        found = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(vids), -1)
        out = np.zeros((len(vids) + spare, found.shape[1]), dtype=np.float32)
        out[: len(vids)] = found
        return out

    def vector_blocks(
        self, tenant: str, user_id: str, vids: np.ndarray
    ) -> t.Iterator[tuple[np.ndarray, np.ndarray]]:
        """All of the user's vectors, 8 MB at a time, straight from vec0's chunks."""
        return vec0.vector_blocks(self.conn, tenant, user_id, vids)

    # -- re-embedding -------------------------------------------------------

    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        """Replace every vector by its staged ones and record the new model."""
        self.conn.execute("DROP TABLE memory_vectors")
        for statement in vec0.TABLE:
            self.conn.execute(vec0.render(statement, dimensions))
        staged = self._staged()
        vid = self._new_vids(sum(n for *_, n in staged))
        for seq, tenant, user_id, n in staged:
            self.conn.execute(
                "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) "
                "SELECT ? + window, ?, ?, embedding FROM reembed_staging "
                "WHERE seq = ? ORDER BY window",
                (vid, tenant, user_id, seq),
            )
            self.conn.execute(
                "UPDATE memories SET first_vid = ?, windows = ? WHERE seq = ?", (vid, n, seq)
            )
            vid += n
        # Every vector changed: caches of any user must reload.
        self.conn.execute(
            "UPDATE memory_users SET generation = generation + 1, "
            "max_vid = (SELECT coalesce(max(first_vid + windows - 1), 0) FROM memories "
            "WHERE memories.tenant = memory_users.tenant "
            "AND memories.user_id = memory_users.user_id)"
        )
        self._switched(embedder_id, dimensions)


def _blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()
