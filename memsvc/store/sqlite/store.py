"""The SQLite store: :class:`SqliteStore`, memsvc's data over one connection to its file."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import typing as t

import numpy as np

from ...models import ApiKey
from ...models import Memory
from ...models import Version
from ...models import compact_json
from ...models import dedupe_key
from .. import postings
from ..base import ENTRY_COLUMNS as _ENTRY_COLUMNS
from ..base import KEY_COLUMNS as _KEY_COLUMNS
from ..base import MEMORY_COLUMNS as _MEMORY_COLUMNS
from ..base import Entry
from ..base import Store
from ..base import UserState
from ..base import key_of as _key
from ..base import memory_of as _memory
from . import schema
from . import vec0

# A memory is visible until it expires.
_VISIBLE = "(expires_at IS NULL OR expires_at > ?)"

_savepoints = itertools.count()

_INSERT_POSTING = postings.INSERT.replace("%s", "?")
_DELETE_POSTING = postings.DELETE.replace("%s", "?")


class SqliteStore(Store):
    """memsvc's data in one SQLite file, over one connection."""

    kind = "SQLite"
    knn_max = vec0.KNN_MAX

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
                # SQLite may have rolled everything back already (a full disk).
                if self.conn.in_transaction:
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
            # SQLite may have rolled back already (a full disk, an I/O error).
            if self.conn.in_transaction:
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

    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

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
            self.conn.execute(
                "INSERT INTO memsvc_meta (key, value) VALUES ('health', '') "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            )
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

    def erasures(self) -> int:
        """A number that grows whenever a memory is deleted or replaced, in any process."""
        return int(schema.get_meta(self.conn, "erasures") or 0)

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
        self.conn.execute("SELECT value FROM memsvc_meta WHERE key = 'schema_version'").fetchone()

    # -- memories: writes ------------------------------------------------------
    # Call inside write(); vectors[i] holds memory i's windows, one row each.

    def _new_vids(self, count: int) -> int:
        """Reserve ``count`` consecutive vector ids, never handed out before."""
        first = int(schema.get_meta(self.conn, "next_vid") or 1)
        schema.set_meta(self.conn, "next_vid", str(first + count))
        return first

    def insert_memories(
        self, memories: t.Sequence[Memory], vectors: t.Sequence[np.ndarray] | np.ndarray
    ) -> list[int]:
        """Insert memories with their vectors and keyword index rows.

        ``vectors[i]`` holds memory ``i``'s windows, one row each; a 2-D
        array is one vector per memory. Memories get increasing ``seq`` in
        the order given; vectors go in grouped by user, which is how vec0
        inserts fastest.
        """
        if len(memories) == 0:
            return []
        if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
            vectors = [row[None, :] for row in vectors]
        windows = [len(v) for v in vectors]
        if any(w < 1 for w in windows) or len(vectors) != len(memories):
            raise ValueError("every memory needs at least one vector")
        (last,) = self.conn.execute(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0)"
        ).fetchone()
        seqs = range(last + 1, last + 1 + len(memories))
        vid = self._new_vids(sum(windows))
        first_vids = []
        for w in windows:
            first_vids.append(vid)
            vid += w
        self.conn.executemany(
            f"INSERT INTO memories (seq, {_MEMORY_COLUMNS}, first_vid, windows, dedupe_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    seq, m.id, m.tenant, m.user_id, m.content, compact_json(m.metadata),
                    m.created_at, m.updated_at, m.expires_at, m.version, first, w,
                    dedupe_key(m.content, m.metadata),
                )
                for seq, m, first, w in zip(seqs, memories, first_vids, windows, strict=True)
            ],
        )  # fmt: skip
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

    def _index(self, memories: t.Iterable[tuple[int, int, str]]) -> None:
        """Add ``(user_key, seq, content)`` to the keyword index."""
        found = postings.of(memories)
        self.conn.executemany(_INSERT_POSTING, found.rows)
        self.conn.executemany(
            "UPDATE memory_users SET terms = terms + ? WHERE user_key = ?",
            [(total, key) for key, total in found.totals.items()],
        )

    def _unindex(self, user_key: int, seq: int, content: str) -> None:
        """Remove one memory from the keyword index (secure_delete zeroes its rows' bytes)."""
        keys, length = postings.keys_of(user_key, seq, content)
        self.conn.executemany(_DELETE_POSTING, keys)
        self.conn.execute(
            "UPDATE memory_users SET terms = terms - ? WHERE user_key = ?", (length, user_key)
        )

    def _user_key(self, tenant: str, user_id: str) -> int:
        (key,) = self.conn.execute(
            "SELECT user_key FROM memory_users WHERE tenant = ? AND user_id = ?", (tenant, user_id)
        ).fetchone()
        return int(key)

    def insert_versions(self, seq: int, versions: t.Sequence[Version]) -> None:
        """Earlier versions of the memory ``seq`` (an import carries them over)."""
        self.conn.executemany(
            "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(seq, v.version, v.content, compact_json(v.metadata), v.at) for v in versions],
        )

    def update_memory(
        self, seq: int, previous: Memory, updated: Memory, vectors: np.ndarray | None
    ) -> None:
        """Replace a memory's record by ``updated``; its vectors too if ``vectors`` is given.

        ``previous`` (the record as it was) goes to the memory's history.
        """
        self.conn.execute(
            "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                seq, previous.version, previous.content, compact_json(previous.metadata),
                previous.updated_at,
            ),
        )  # fmt: skip
        self.conn.execute(
            "UPDATE memories SET content = ?, metadata = ?, updated_at = ?, expires_at = ?, "
            "version = ?, dedupe_key = ? WHERE seq = ?",
            (
                updated.content, compact_json(updated.metadata), updated.updated_at,
                updated.expires_at, updated.version,
                dedupe_key(updated.content, updated.metadata), seq,
            ),
        )  # fmt: skip
        key = (updated.tenant, updated.user_id)
        user_key = self._user_key(*key)
        self.conn.execute(
            "UPDATE memory_users SET last_write = max(last_write, ?) WHERE user_key = ?",
            (updated.updated_at, user_key),
        )
        if vectors is None:
            self.conn.execute(
                "UPDATE memory_users SET updates = updates + 1 WHERE user_key = ?", (user_key,)
            )
            return
        first_vid, windows = self.conn.execute(
            "SELECT first_vid, windows FROM memories WHERE seq = ?", (seq,)
        ).fetchone()
        self._delete_vectors(first_vid, windows)
        new_first = self._new_vids(len(vectors))
        self.conn.executemany(
            "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) VALUES (?, ?, ?, ?)",
            [(new_first + w, *key, _blob(row)) for w, row in enumerate(vectors)],
        )
        self.conn.execute(
            "UPDATE memories SET first_vid = ?, windows = ? WHERE seq = ?",
            (new_first, len(vectors), seq),
        )
        self._unindex(user_key, seq, previous.content)
        self._index([(user_key, seq, updated.content)])
        self.conn.execute(
            "UPDATE memory_users SET deletes = deletes + 1, max_vid = max(max_vid, ?) "
            "WHERE user_key = ?",
            (new_first + len(vectors) - 1, user_key),
        )
        self._erased()

    def _delete_vectors(self, first_vid: int, windows: int) -> None:
        self.conn.executemany(
            "DELETE FROM memory_vectors WHERE rowid = ?",
            [(vid,) for vid in range(first_vid, first_vid + windows)],
        )

    def delete_memory(self, tenant: str, memory_id: str) -> bool:
        """Delete a memory, its vectors, history and keyword index rows; False if none."""
        row = self.conn.execute(
            "DELETE FROM memories WHERE id = ? AND tenant = ? "
            "RETURNING seq, user_id, first_vid, windows, content",
            (memory_id, tenant),
        ).fetchone()
        if row is None:
            return False
        seq, user_id, first_vid, windows, content = row
        self._delete_vectors(first_vid, windows)
        user_key = self._user_key(tenant, user_id)
        self._unindex(user_key, seq, content)
        self.conn.execute(
            "UPDATE memory_users SET count = count - 1, deletes = deletes + 1 WHERE user_key = ?",
            (user_key,),
        )
        # A user with no memories left is forgotten, id and all (vec0 keeps
        # a partition's emptied chunks, which hold the ids, unless told).
        gone = self.conn.execute(
            "DELETE FROM memory_users WHERE user_key = ? AND count = 0 RETURNING user_key",
            (user_key,),
        ).fetchone()
        if gone is not None:
            vec0.erase_partition(self.conn, tenant, user_id)
        self._erased()
        return True

    def delete_user(self, tenant: str, user_id: str) -> int:
        """Delete every memory of one end user of one tenant; returns how many."""
        rows = self.conn.execute(
            "DELETE FROM memories WHERE tenant = ? AND user_id = ? "
            "RETURNING seq, first_vid, windows",
            (tenant, user_id),
        ).fetchall()
        if not rows:
            return 0
        erased = vec0.erase_partition(self.conn, tenant, user_id)
        expected = sum(w for _, _, w in rows)
        if erased != expected:  # the vectors and the records disagree: touch nothing
            raise RuntimeError(f"{tenant}/{user_id}: {erased} vectors for {expected} windows")
        user_key = self._user_key(tenant, user_id)
        self.conn.execute("DELETE FROM memory_terms WHERE user_key = ?", (user_key,))
        # The user's row goes too: back again, they are a new user (a new key).
        self.conn.execute("DELETE FROM memory_users WHERE user_key = ?", (user_key,))
        self._erased()
        return len(rows)

    def expired(self, now: int, limit: int) -> list[tuple[str, str]]:
        """(tenant, id) of up to ``limit`` memories whose time is up."""
        return self.conn.execute(
            "SELECT tenant, id FROM memories WHERE expires_at <= ? LIMIT ?", (now, limit)
        ).fetchall()

    # -- memories: reads -------------------------------------------------------
    # Only memories that have not expired at ``now`` are seen.

    def get_memory(self, tenant: str, memory_id: str, now: int) -> Memory | None:
        row = self.conn.execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = ? AND tenant = ? AND {_VISIBLE}",
            (memory_id, tenant, now),
        ).fetchone()
        return _memory(row) if row else None

    def locate(self, tenant: str, memory_id: str, now: int) -> tuple[int, Memory] | None:
        """A visible memory with its ``seq``, for an update or a cursor."""
        row = self.conn.execute(
            f"SELECT seq, {_MEMORY_COLUMNS} FROM memories "
            f"WHERE id = ? AND tenant = ? AND {_VISIBLE}",
            (memory_id, tenant, now),
        ).fetchone()
        return (row[0], _memory(row[1:])) if row else None

    def find_duplicate(self, tenant: str, user_id: str, key: bytes, now: int) -> Memory | None:
        """The user's oldest visible memory with this :func:`~memsvc.models.dedupe_key`."""
        row = self.conn.execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
            f"AND dedupe_key = ? AND {_VISIBLE} ORDER BY seq LIMIT 1",
            (tenant, user_id, key, now),
        ).fetchone()
        return _memory(row) if row else None

    def page(
        self,
        tenant: str,
        user_id: str,
        now: int,
        *,
        before: tuple[int, int] | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
    ) -> t.Iterator[tuple[int, Memory]]:
        """A user's visible memories newest first, from just after ``before`` on.

        ``before`` is the ``(created_at, seq)`` of the last memory already
        seen. Rows stream: the caller stops when it has enough.
        """
        where = [f"tenant = ? AND user_id = ? AND {_VISIBLE}"]
        params: list[t.Any] = [tenant, user_id, now]
        if before is not None:
            where.append("(created_at < ? OR (created_at = ? AND seq < ?))")
            params += [before[0], before[0], before[1]]
        if created_after is not None:
            where.append("created_at > ?")
            params.append(created_after)
        if created_before is not None:
            where.append("created_at < ?")
            params.append(created_before)
        cursor = self.conn.execute(
            f"SELECT seq, {_MEMORY_COLUMNS} FROM memories WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, seq DESC",
            params,
        )
        for row in cursor:
            yield row[0], _memory(row[1:])

    def _where_owner(self, tenant: str | None, user_id: str | None) -> tuple[str, list[t.Any]]:
        where, params = [], []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        return " AND ".join(where) or "1", params

    def count_memories(self, tenant: str | None, user_id: str | None, now: int) -> int:
        where, params = self._where_owner(tenant, user_id)
        (n,) = self.conn.execute(
            f"SELECT count(*) FROM memories WHERE {where} AND {_VISIBLE}", (*params, now)
        ).fetchone()
        return int(n)

    def all_memories(
        self, tenant: str | None, user_id: str | None, now: int
    ) -> t.Iterator[tuple[int, Memory, int, int]]:
        """Visible memories (of a tenant, of a user), oldest first, with seq and vector ids."""
        where, params = self._where_owner(tenant, user_id)
        cursor = self.conn.execute(
            f"SELECT seq, {_MEMORY_COLUMNS}, first_vid, windows FROM memories "
            f"WHERE {where} AND {_VISIBLE} ORDER BY seq",
            (*params, now),
        )
        for row in cursor:
            yield row[0], _memory(row[1:10]), row[10], row[11]

    def existing_ids(self, ids: t.Sequence[str]) -> set[str]:
        """Which of these memory ids exist, in any tenant."""
        found: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self.conn.execute(f"SELECT id FROM memories WHERE id IN ({marks})", chunk)
            found.update(row[0] for row in rows)
        return found

    def versions_size(self, seq: int) -> int:
        """Bytes of text and metadata of a memory's earlier versions, without reading them."""
        (n,) = self.conn.execute(
            "SELECT coalesce(sum(length(CAST(content AS BLOB)) + length(CAST(metadata AS BLOB)) "
            "+ 100), 0) FROM memory_history WHERE memory_seq = ?",
            (seq,),
        ).fetchone()
        return int(n)

    def versions(self, seq: int) -> list[Version]:
        """A memory's earlier versions, oldest first (the current one is in ``memories``)."""
        rows = self.conn.execute(
            "SELECT version, content, metadata, at FROM memory_history WHERE memory_seq = ? "
            "ORDER BY version",
            (seq,),
        ).fetchall()
        return [
            Version(v, content, json.loads(meta), "add" if v == 1 else "update", at)
            for v, content, meta, at in rows
        ]

    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        if not seqs:
            return {}
        marks = ",".join("?" * len(seqs))
        rows = self.conn.execute(
            f"SELECT seq, {_MEMORY_COLUMNS} FROM memories WHERE seq IN ({marks})", list(seqs)
        ).fetchall()
        return {row[0]: _memory(row[1:]) for row in rows}

    # -- search ----------------------------------------------------------------

    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        """The user's change counters (see :class:`UserState`)."""
        row = self.conn.execute(
            "SELECT count, max_vid, deletes, updates, generation, user_key, terms "
            "FROM memory_users WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        ).fetchone()
        return UserState(*row) if row else None

    def entries(self, tenant: str, user_id: str, after_vid: int = 0) -> list[Entry]:
        """A user's memories whose vectors have ids above ``after_vid``, by vector id.

        Expired memories are included: whether one is visible is decided at
        search time, from ``expires_at``.
        """
        rows = self.conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM memories "
            "WHERE tenant = ? AND user_id = ? AND first_vid > ? ORDER BY first_vid",
            (tenant, user_id, after_vid),
        ).fetchall()
        return [Entry(*row) for row in rows]

    def _entries_in(
        self, tenant: str, user_id: str, column: str, values: t.Sequence[int]
    ) -> t.Iterator[Entry]:
        """The user's entries whose ``column`` is one of ``values``, 500 values a query."""
        for start in range(0, len(values), 500):
            chunk = [int(v) for v in values[start : start + 500]]
            marks = ",".join("?" * len(chunk))
            for row in self.conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                f"AND {column} IN ({marks})",
                (tenant, user_id, *chunk),
            ):
                yield Entry(*row)

    def entries_by_seq(self, tenant: str, user_id: str, seqs: t.Sequence[int]) -> dict[int, Entry]:
        """The user's memories with these seqs (others, and missing ones, are absent)."""
        return {e.seq: e for e in self._entries_in(tenant, user_id, "seq", seqs)}

    def owners(self, tenant: str, user_id: str, vids: t.Sequence[int]) -> dict[int, Entry]:
        """The memory each of ``vids`` belongs to (a vid with no memory left is absent)."""
        # Most memories have one vector, found by its first id at once.
        found = {e.first_vid: e for e in self._entries_in(tenant, user_id, "first_vid", vids)}
        for vid in vids:
            if int(vid) in found:
                continue
            row = self.conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
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

    def postings(self, user_key: int, terms: t.Sequence[int]) -> list[tuple[int, int, int, int]]:
        """``(term, seq, tf, dl)`` of the user's memories holding any of ``terms``."""
        if not terms:
            return []
        marks = ",".join("?" * len(terms))
        return self.conn.execute(
            f"SELECT term, seq, tf, dl FROM memory_terms WHERE user_key = ? AND term IN ({marks})",
            (user_key, *terms),
        ).fetchall()

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

    def active_keys(self, tenant: str) -> int:
        (n,) = self.conn.execute(
            "SELECT count(*) FROM api_keys WHERE tenant = ? AND revoked_at IS NULL", (tenant,)
        ).fetchone()
        return int(n)

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

    def keys_with_hashes(self, tenant: str | None = None) -> list[tuple[ApiKey, bytes]]:
        where, params = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        rows = self.conn.execute(
            f"SELECT {_KEY_COLUMNS}, secret_hash FROM api_keys {where} "
            "ORDER BY tenant, created_at, rowid",
            params,
        ).fetchall()
        return [(_key(row[:-1]), bytes(row[-1])) for row in rows]

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
            "CREATE TABLE IF NOT EXISTS reembed_staging (seq INTEGER NOT NULL, "
            "window INTEGER NOT NULL, embedder TEXT NOT NULL, embedding BLOB NOT NULL, "
            "PRIMARY KEY (seq, window))"
        )
        # Vectors staged for another model by an earlier run are useless.
        self.conn.execute("DELETE FROM reembed_staging WHERE embedder != ?", (embedder_id,))

    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        """(seq, content) of memories with no staged vectors yet, oldest first."""
        return self.conn.execute(
            "SELECT seq, content FROM memories "
            "WHERE seq > (SELECT coalesce(max(seq), 0) FROM reembed_staging) "
            "ORDER BY seq LIMIT ?",
            (limit,),
        ).fetchall()

    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        """Stage each memory's new windows' vectors: ``(seq, [windows, dims])``."""
        self.conn.executemany(
            "INSERT OR REPLACE INTO reembed_staging (seq, window, embedder, embedding) "
            "VALUES (?, ?, ?, ?)",
            [
                (seq, w, embedder_id, _blob(vector))
                for seq, vectors in rows
                for w, vector in enumerate(vectors)
            ],
        )

    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        """Replace every vector by its staged ones and record the new model."""
        self.conn.execute("DROP TABLE memory_vectors")
        for statement in vec0.TABLE:
            self.conn.execute(vec0.render(statement, dimensions))
        staged = self.conn.execute(
            "SELECT m.seq, m.tenant, m.user_id, count(*) FROM reembed_staging AS s "
            "JOIN memories AS m ON m.seq = s.seq GROUP BY m.seq ORDER BY m.seq"
        ).fetchall()
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
        schema.set_meta(self.conn, "embedder", embedder_id)
        schema.set_meta(self.conn, "dimensions", str(dimensions))
        self.conn.execute("DROP TABLE reembed_staging")
        # Every vector changed: caches of any user must reload.
        self.conn.execute(
            "UPDATE memory_users SET generation = generation + 1, "
            "max_vid = (SELECT coalesce(max(first_vid + windows - 1), 0) FROM memories "
            "WHERE memories.tenant = memory_users.tenant "
            "AND memories.user_id = memory_users.user_id)"
        )
        self._erased()  # the old vectors' bytes go at the next checkpoint


def _blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()
