"""The PostgreSQL store: :class:`PgStore`, memsvc's data over one connection."""

from __future__ import annotations

import contextlib
import itertools
import json
import typing as t

import numpy as np
import psycopg
from psycopg.pq import TransactionStatus

from ...models import ApiKey
from ...models import Memory
from ...models import Version
from ...models import compact_json
from ...models import dedupe_key
from .. import postings
from .. import schema as shared_schema
from ..base import ENTRY_COLUMNS
from ..base import KEY_COLUMNS
from ..base import MEMORY_COLUMNS
from ..base import Entry
from ..base import Store
from ..base import UserState
from ..base import key_of
from ..base import memory_of
from . import schema
from .connection import raw_vectors
from .connection import register_vector
from .connection import vectors_of

_VISIBLE = "(expires_at IS NULL OR expires_at > %s)"
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

_savepoints = itertools.count()


class PgStore(Store):
    """memsvc's data in PostgreSQL, over one connection."""

    kind = "PostgreSQL"
    #: pgvector's exact ordering has no limit of its own; this bounds one fetch.
    knn_max = 4096

    def __init__(self, conn: psycopg.Connection[t.Any]):
        self.conn = conn
        self._writing = False

    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status in _IN_TRANSACTION

    def _rows(self, query: str, params: t.Sequence[t.Any] = ()) -> list[t.Any]:
        return self.conn.execute(query, params).fetchall()

    def _one(self, query: str, params: t.Sequence[t.Any] = ()) -> t.Any:
        return self.conn.execute(query, params).fetchone()

    # -- transactions ----------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> t.Iterator[Store]:
        if self.in_transaction():
            name = f"sp{next(_savepoints)}"
            self.conn.execute(f"SAVEPOINT {name}")
            was_writing, self._writing = self._writing, True
            try:
                yield self
            except BaseException:
                if self.in_transaction() and not self.conn.closed:
                    self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                    self.conn.execute(f"RELEASE SAVEPOINT {name}")
                raise
            finally:
                self._writing = was_writing
            self.conn.execute(f"RELEASE SAVEPOINT {name}")
            return
        self.conn.execute("BEGIN")
        self._writing = True
        try:
            yield self
        except BaseException:
            self._rollback()
            raise
        finally:
            self._writing = False
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    @contextlib.contextmanager
    def read(self) -> t.Iterator[Store]:
        if self.in_transaction():
            yield self
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        try:
            yield self
        except BaseException:
            self._rollback()
            raise
        self.conn.execute("COMMIT")

    def _rollback(self) -> None:
        if not self.conn.closed and self.in_transaction():
            self.conn.execute("ROLLBACK")

    def reset(self) -> None:
        self._writing = False
        self._rollback()

    def _lock_user(self, tenant: str, user_id: str) -> None:
        """Make the user's other writers wait until this transaction ends (see the module)."""
        self._lock_users([(tenant, user_id)])

    def _lock_users(self, users: t.Iterable[tuple[str, str]]) -> None:
        """:meth:`_lock_user` for several users, in one statement, always in the same order.

        Two transactions locking overlapping users in one order never wait on
        each other crosswise.
        """
        keys = sorted({f"{tenant}\x1f{user_id}" for tenant, user_id in users})
        self.conn.execute(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(key, 0))) FROM "
            "(SELECT key FROM unnest(%s::text[]) AS key ORDER BY key) AS ordered",
            (keys,),
        )

    def _lock_owner(self, tenant: str, memory_id: str) -> None:
        """Inside a write: lock the user whose memory this is, if there is one."""
        if not self._writing:
            return
        row = self._one(
            "SELECT user_id FROM memories WHERE id = %s AND tenant = %s", (memory_id, tenant)
        )
        if row is not None:
            self._lock_user(tenant, row[0])

    # -- schema and health -----------------------------------------------------

    def migrate(self, embedder_id: str, dimensions: int) -> None:
        with self.write():
            schema.migrate(self.conn, embedder_id, dimensions)
        # The vector type exists now: send arrays as vectors on this connection.
        register_vector(self.conn)

    def embedder(self) -> tuple[str, int] | None:
        return schema.recorded_embedder(self.conn)

    def check_embedder(self, embedder_id: str, dimensions: int) -> None:
        shared_schema.check_recorded(self.embedder(), embedder_id, dimensions)

    def ping(self) -> None:
        self._one("SELECT value FROM memsvc_meta WHERE key = 'schema_version'")

    def probe_write(self) -> None:
        if self.in_transaction():
            return
        self.conn.execute("BEGIN")
        try:
            # Waiting on another writer's row lock would prove nothing.
            self.conn.execute("SET LOCAL lock_timeout = '2s'")
            self.conn.execute(
                "INSERT INTO memsvc_meta (key, value) VALUES ('health', '') "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            )
        finally:
            self._rollback()

    def checkpoint(self) -> bool:
        # Deleted rows are gone from every query at once; their bytes stay in
        # PostgreSQL's files until vacuum reuses the space (see docs).
        return True

    def refresh_statistics(self) -> None:
        # Until its first ANALYZE (autovacuum's comes within minutes), the
        # planner knows nothing of how rows spread over users, and its plan
        # for loading vectors by id read all of a large user's vectors to
        # find one: 2.2 ms a call instead of 0.02 ms, export 342/s.
        for table in (
            "memories", "memory_vectors", "memory_history", "memory_users", "memory_terms",
        ):  # fmt: skip
            self.conn.execute(f"ANALYZE {table}")

    def erasures(self) -> int:
        (total,) = self._one("SELECT last_value FROM memsvc_erasures")
        return int(total)

    def _erased(self) -> None:
        # A sequence: counting never makes writers of different users wait.
        self._one("SELECT nextval('memsvc_erasures')")

    # -- memories: writes ----------------------------------------------------------

    def _reserve_vids(
        self, wanted: dict[tuple[str, str], tuple[int, int, int]]
    ) -> dict[tuple[str, str], tuple[int, int]]:
        """Per user, the first of their new vector ids and their user key, in one statement.

        ``wanted`` maps each user to (vector ids wanted, memories added, time
        of the write); the users' counters are updated accordingly.
        """
        users = sorted(wanted)
        rows = self._rows(
            "INSERT INTO memory_users AS u (tenant, user_id, count, max_vid, deletes, updates, "
            "generation, last_write) SELECT tenant, user_id, added, vids, 0, 0, 0, at FROM "
            "unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            "AS w (tenant, user_id, vids, added, at) ON CONFLICT (tenant, user_id) DO UPDATE "
            "SET count = u.count + excluded.count, max_vid = u.max_vid + excluded.max_vid, "
            "last_write = greatest(u.last_write, excluded.last_write) "
            "RETURNING tenant, user_id, max_vid, user_key",
            (
                [tenant for tenant, _ in users],
                [user for _, user in users],
                [wanted[u][0] for u in users],
                [wanted[u][1] for u in users],
                [wanted[u][2] for u in users],
            ),
        )
        return {
            (tenant, user): (int(last) - wanted[(tenant, user)][0] + 1, int(key))
            for tenant, user, last, key in rows
        }

    def _index(self, memories: t.Iterable[tuple[int, int, str]]) -> None:
        """Add ``(user_key, seq, content)`` to the keyword index."""
        found = postings.of(memories)
        with self.conn.cursor() as cur:
            cur.executemany(postings.INSERT, found.rows)
            cur.executemany(
                "UPDATE memory_users SET terms = terms + %s WHERE user_key = %s",
                [(total, key) for key, total in found.totals.items()],
            )

    def _unindex(self, user_key: int, seq: int, content: str) -> None:
        """Remove one memory from the keyword index."""
        keys, length = postings.keys_of(user_key, seq, content)
        with self.conn.cursor() as cur:
            cur.executemany(postings.DELETE, keys)
        self.conn.execute(
            "UPDATE memory_users SET terms = terms - %s WHERE user_key = %s", (length, user_key)
        )

    def _user_key(self, tenant: str, user_id: str) -> int:
        (key,) = self._one(
            "SELECT user_key FROM memory_users WHERE tenant = %s AND user_id = %s",
            (tenant, user_id),
        )
        return int(key)

    def insert_memories(
        self, memories: t.Sequence[Memory], vectors: t.Sequence[np.ndarray] | np.ndarray
    ) -> list[int]:
        if len(memories) == 0:
            return []
        if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
            vectors = [row[None, :] for row in vectors]
        windows = [len(v) for v in vectors]
        if any(w < 1 for w in windows) or len(vectors) != len(memories):
            raise ValueError("every memory needs at least one vector")
        users: dict[tuple[str, str], list[int]] = {}
        for i, m in enumerate(memories):
            users.setdefault((m.tenant, m.user_id), []).append(i)
        self._lock_users(users)
        firsts = self._reserve_vids(
            {
                user: (
                    sum(windows[i] for i in members),
                    len(members),
                    max(memories[i].updated_at for i in members),
                )
                for user, members in users.items()
            }
        )
        first_vids = [0] * len(memories)
        for user, members in users.items():
            vid = firsts[user][0]
            for i in members:
                first_vids[i] = vid
                vid += windows[i]
        seqs = sorted(
            row[0]
            for row in self._rows(
                "SELECT nextval(pg_get_serial_sequence('memories', 'seq')) "
                "FROM generate_series(1, %s)",
                (len(memories),),
            )
        )
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO memories (seq, {MEMORY_COLUMNS}, first_vid, windows, dedupe_key) "
                "OVERRIDING SYSTEM VALUE "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        seq, m.id, m.tenant, m.user_id, m.content, compact_json(m.metadata),
                        m.created_at, m.updated_at, m.expires_at, m.version, first, w,
                        dedupe_key(m.content, m.metadata),
                    )
                    for seq, m, first, w in zip(seqs, memories, first_vids, windows, strict=True)
                ],
            )  # fmt: skip
            cur.executemany(
                "INSERT INTO memory_vectors (tenant, user_id, vid, embedding) "
                "VALUES (%s, %s, %s, %s)",
                [
                    (m.tenant, m.user_id, first_vids[i] + w, _f32(row))
                    for i, m in enumerate(memories)
                    for w, row in enumerate(vectors[i])
                ],
            )
        self._index(
            (firsts[m.tenant, m.user_id][1], seq, m.content)
            for seq, m in zip(seqs, memories, strict=True)
        )
        return seqs

    def insert_versions(self, seq: int, versions: t.Sequence[Version]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
                "VALUES (%s, %s, %s, %s, %s)",
                [(seq, v.version, v.content, compact_json(v.metadata), v.at) for v in versions],
            )

    def update_memory(
        self, seq: int, previous: Memory, updated: Memory, vectors: np.ndarray | None
    ) -> None:
        tenant, user_id = updated.tenant, updated.user_id
        self._lock_user(tenant, user_id)
        self.conn.execute(
            "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
            "VALUES (%s, %s, %s, %s, %s)",
            (
                seq, previous.version, previous.content, compact_json(previous.metadata),
                previous.updated_at,
            ),
        )  # fmt: skip
        self.conn.execute(
            "UPDATE memories SET content = %s, metadata = %s, updated_at = %s, expires_at = %s, "
            "version = %s, dedupe_key = %s WHERE seq = %s",
            (
                updated.content, compact_json(updated.metadata), updated.updated_at,
                updated.expires_at, updated.version,
                dedupe_key(updated.content, updated.metadata), seq,
            ),
        )  # fmt: skip
        user_key = self._user_key(tenant, user_id)
        self.conn.execute(
            "UPDATE memory_users SET last_write = greatest(last_write, %s) WHERE user_key = %s",
            (updated.updated_at, user_key),
        )
        if vectors is None:
            self.conn.execute(
                "UPDATE memory_users SET updates = updates + 1 WHERE user_key = %s", (user_key,)
            )
            return
        first_vid, windows = self._one(
            "SELECT first_vid, windows FROM memories WHERE seq = %s", (seq,)
        )
        self.conn.execute(
            "DELETE FROM memory_vectors WHERE tenant = %s AND user_id = %s "
            "AND vid BETWEEN %s AND %s",
            (tenant, user_id, first_vid, first_vid + windows - 1),
        )
        (last,) = self._one(
            "UPDATE memory_users SET max_vid = max_vid + %s, deletes = deletes + 1 "
            "WHERE tenant = %s AND user_id = %s RETURNING max_vid",
            (len(vectors), tenant, user_id),
        )
        new_first = int(last) - len(vectors) + 1
        with self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_vectors (tenant, user_id, vid, embedding) "
                "VALUES (%s, %s, %s, %s)",
                [(tenant, user_id, new_first + w, _f32(row)) for w, row in enumerate(vectors)],
            )
        self.conn.execute(
            "UPDATE memories SET first_vid = %s, windows = %s WHERE seq = %s",
            (new_first, len(vectors), seq),
        )
        self._unindex(user_key, seq, previous.content)
        self._index([(user_key, seq, updated.content)])
        self._erased()

    def delete_memory(self, tenant: str, memory_id: str) -> bool:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            "DELETE FROM memories WHERE id = %s AND tenant = %s "
            "RETURNING seq, user_id, first_vid, windows, content",
            (memory_id, tenant),
        )
        if row is None:
            return False
        seq, user_id, first_vid, windows, content = row
        self.conn.execute(
            "DELETE FROM memory_vectors WHERE tenant = %s AND user_id = %s "
            "AND vid BETWEEN %s AND %s",
            (tenant, user_id, first_vid, first_vid + windows - 1),
        )
        user_key = self._user_key(tenant, user_id)
        self._unindex(user_key, seq, content)
        self.conn.execute(
            "UPDATE memory_users SET count = count - 1, deletes = deletes + 1 WHERE user_key = %s",
            (user_key,),
        )
        # A user with no memories left is forgotten, id and all.
        self.conn.execute("DELETE FROM memory_users WHERE user_key = %s AND count = 0", (user_key,))
        self._erased()
        return True

    def delete_user(self, tenant: str, user_id: str) -> int:
        self._lock_user(tenant, user_id)
        rows = self._rows(
            "DELETE FROM memories WHERE tenant = %s AND user_id = %s RETURNING windows",
            (tenant, user_id),
        )
        if not rows:
            return 0
        erased = self.conn.execute(
            "DELETE FROM memory_vectors WHERE tenant = %s AND user_id = %s", (tenant, user_id)
        ).rowcount
        expected = sum(w for (w,) in rows)
        if erased != expected:  # the vectors and the records disagree: touch nothing
            raise RuntimeError(f"{tenant}/{user_id}: {erased} vectors for {expected} windows")
        user_key = self._user_key(tenant, user_id)
        self.conn.execute("DELETE FROM memory_terms WHERE user_key = %s", (user_key,))
        # The user's row goes too: back again, they are a new user (a new key).
        self.conn.execute("DELETE FROM memory_users WHERE user_key = %s", (user_key,))
        self._erased()
        return len(rows)

    def expired(self, now: int, limit: int) -> list[tuple[str, str]]:
        return [
            (tenant, memory_id)
            for tenant, memory_id in self._rows(
                "SELECT tenant, id FROM memories WHERE expires_at <= %s LIMIT %s", (now, limit)
            )
        ]

    # -- memories: reads -----------------------------------------------------------

    def get_memory(self, tenant: str, memory_id: str, now: int) -> Memory | None:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = %s AND tenant = %s AND {_VISIBLE}",
            (memory_id, tenant, now),
        )
        return memory_of(row) if row else None

    def locate(self, tenant: str, memory_id: str, now: int) -> tuple[int, Memory] | None:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories "
            f"WHERE id = %s AND tenant = %s AND {_VISIBLE}",
            (memory_id, tenant, now),
        )
        return (row[0], memory_of(row[1:])) if row else None

    def find_duplicate(self, tenant: str, user_id: str, key: bytes, now: int) -> Memory | None:
        if self._writing:
            self._lock_user(tenant, user_id)
        row = self._one(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = %s AND user_id = %s "
            f"AND dedupe_key = %s AND {_VISIBLE} ORDER BY seq LIMIT 1",
            (tenant, user_id, key, now),
        )
        return memory_of(row) if row else None

    def _stream(self, query: str, params: t.Sequence[t.Any]) -> t.Iterator[t.Any]:
        """Rows of ``query`` as they come, a batch at a time (a server-side cursor)."""
        if not self.in_transaction():
            yield from self._rows(query, params)
            return
        with self.conn.cursor(name=f"memsvc_stream_{next(_savepoints)}") as cur:
            cur.itersize = 200
            cur.execute(query, params)
            yield from cur

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
        where = [f"tenant = %s AND user_id = %s AND {_VISIBLE}"]
        params: list[t.Any] = [tenant, user_id, now]
        if before is not None:
            where.append("(created_at, seq) < (%s, %s)")
            params += [before[0], before[1]]
        if created_after is not None:
            where.append("created_at > %s")
            params.append(created_after)
        if created_before is not None:
            where.append("created_at < %s")
            params.append(created_before)
        for row in self._stream(
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, seq DESC",
            params,
        ):
            yield row[0], memory_of(row[1:])

    def _where_owner(self, tenant: str | None, user_id: str | None) -> tuple[str, list[t.Any]]:
        where, params = [], []
        if tenant is not None:
            where.append("tenant = %s")
            params.append(tenant)
        if user_id is not None:
            where.append("user_id = %s")
            params.append(user_id)
        return " AND ".join(where) or "true", params

    def count_memories(self, tenant: str | None, user_id: str | None, now: int) -> int:
        where, params = self._where_owner(tenant, user_id)
        (n,) = self._one(
            f"SELECT count(*) FROM memories WHERE {where} AND {_VISIBLE}", (*params, now)
        )
        return int(n)

    def all_memories(
        self, tenant: str | None, user_id: str | None, now: int
    ) -> t.Iterator[tuple[int, Memory, int, int]]:
        where, params = self._where_owner(tenant, user_id)
        for row in self._stream(
            f"SELECT seq, {MEMORY_COLUMNS}, first_vid, windows FROM memories "
            f"WHERE {where} AND {_VISIBLE} ORDER BY seq",
            (*params, now),
        ):
            yield row[0], memory_of(row[1:10]), row[10], row[11]

    def exported(
        self, memories: t.Sequence[tuple[int, Memory, int, int]]
    ) -> list[tuple[np.ndarray, list[Version]]]:
        # Two queries for a whole batch: one per memory made export
        # round-trip-bound (1,600 memories/s).
        owners: list[list[t.Any]] = [[], [], []]
        for _, m, first, windows in memories:
            for vid in range(first, first + windows):
                owners[0].append(m.tenant)
                owners[1].append(m.user_id)
                owners[2].append(vid)
        with self.conn.cursor(binary=True) as cur:
            cur.execute(
                "SELECT w.n, v.embedding FROM unnest(%s::text[], %s::text[], %s::bigint[]) "
                "WITH ORDINALITY AS w (tenant, user_id, vid, n) JOIN memory_vectors v "
                "ON v.tenant = w.tenant AND v.user_id = w.user_id AND v.vid = w.vid ORDER BY w.n",
                owners,
            )
            rows = cur.fetchall()
        if len(rows) != len(owners[2]):
            raise RuntimeError(f"export: found {len(rows)} of {len(owners[2])} vectors")
        found = vectors_of([blob for _, blob in rows])
        history: dict[int, list[Version]] = {}
        for seq, v, content, meta, at in self._rows(
            "SELECT memory_seq, version, content, metadata, at FROM memory_history "
            "WHERE memory_seq = ANY(%s) ORDER BY memory_seq, version",
            ([seq for seq, _, _, _ in memories],),
        ):
            event = "add" if v == 1 else "update"
            history.setdefault(seq, []).append(Version(v, content, json.loads(meta), event, at))
        out, start = [], 0
        for seq, _, _, windows in memories:
            out.append((found[start : start + windows], history.get(seq, [])))
            start += windows
        return out

    def existing_ids(self, ids: t.Sequence[str]) -> set[str]:
        rows = self._rows("SELECT id FROM memories WHERE id = ANY(%s)", (list(ids),))
        return {row[0] for row in rows}

    def versions_size(self, seq: int) -> int:
        (n,) = self._one(
            "SELECT coalesce(sum(octet_length(content) + octet_length(metadata) + 100), 0) "
            "FROM memory_history WHERE memory_seq = %s",
            (seq,),
        )
        return int(n)

    def versions(self, seq: int) -> list[Version]:
        rows = self._rows(
            "SELECT version, content, metadata, at FROM memory_history WHERE memory_seq = %s "
            "ORDER BY version",
            (seq,),
        )
        return [
            Version(v, content, json.loads(meta), "add" if v == 1 else "update", at)
            for v, content, meta, at in rows
        ]

    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        if not seqs:
            return {}
        rows = self._rows(
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE seq = ANY(%s)",
            ([int(s) for s in seqs],),
        )
        return {row[0]: memory_of(row[1:]) for row in rows}

    # -- search ----------------------------------------------------------------

    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        row = self._one(
            "SELECT count, max_vid, deletes, updates, generation, user_key, terms "
            "FROM memory_users WHERE tenant = %s AND user_id = %s",
            (tenant, user_id),
        )
        return UserState(*(int(v) for v in row)) if row else None

    def entries(self, tenant: str, user_id: str, after_vid: int = 0) -> list[Entry]:
        rows = self._rows(
            f"SELECT {ENTRY_COLUMNS} FROM memories "
            "WHERE tenant = %s AND user_id = %s AND first_vid > %s ORDER BY first_vid",
            (tenant, user_id, after_vid),
        )
        return [Entry(*row) for row in rows]

    def entries_by_seq(self, tenant: str, user_id: str, seqs: t.Sequence[int]) -> dict[int, Entry]:
        rows = self._rows(
            f"SELECT {ENTRY_COLUMNS} FROM memories WHERE tenant = %s AND user_id = %s "
            "AND seq = ANY(%s)",
            (tenant, user_id, [int(s) for s in seqs]),
        )
        return {row[0]: Entry(*row) for row in rows}

    def owners(self, tenant: str, user_id: str, vids: t.Sequence[int]) -> dict[int, Entry]:
        if not len(vids):
            return {}
        rows = self._rows(
            f"SELECT v.vid, m.* FROM unnest(%s::bigint[]) AS v (vid) CROSS JOIN LATERAL ("
            f"SELECT {ENTRY_COLUMNS} FROM memories WHERE tenant = %s AND user_id = %s "
            "AND first_vid <= v.vid ORDER BY first_vid DESC LIMIT 1) AS m "
            "WHERE v.vid < m.first_vid + m.windows",
            ([int(v) for v in vids], tenant, user_id),
        )
        return {row[0]: Entry(*row[1:]) for row in rows}

    def knn(
        self, tenant: str, user_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float, t.Any]]:
        rows = self._rows(
            "SELECT vid, embedding <=> %s AS distance FROM memory_vectors "
            "WHERE tenant = %s AND user_id = %s ORDER BY distance, vid LIMIT %s",
            (_f32(vector), tenant, user_id, k),
        )
        return [(int(vid), float(distance), None) for vid, distance in rows]

    def vectors(
        self, tenant: str, user_id: str, vids: np.ndarray, spare: int = 0, whole_user: bool = False
    ) -> np.ndarray:
        if whole_user and self.in_transaction():
            return self._whole_user(tenant, user_id, len(vids), spare)
        with self.conn.cursor(binary=True) as cur:
            if whole_user:
                cur.execute(
                    "SELECT vid, embedding FROM memory_vectors "
                    "WHERE tenant = %s AND user_id = %s ORDER BY vid",
                    (tenant, user_id),
                )
            else:
                cur.execute(
                    "SELECT vid, embedding FROM memory_vectors "
                    "WHERE tenant = %s AND user_id = %s AND vid = ANY(%s)",
                    (tenant, user_id, [int(v) for v in vids]),
                )
            rows = cur.fetchall()
        n = len(vids)
        if len(rows) != n:
            raise RuntimeError(f"vectors of {tenant}/{user_id}: found {len(rows)} of {n}")
        found = vectors_of([blob for _, blob in rows])
        out = np.zeros((n + spare, found.shape[1] if n else 0), dtype=np.float32)
        if whole_user:
            out[:n] = found
        else:
            where = {int(vid): i for i, (vid, _) in enumerate(rows)}
            out[:n] = found[[where[int(v)] for v in vids]]
        return out

    def _whole_user(self, tenant: str, user_id: str, n: int, spare: int) -> np.ndarray:
        """Every vector of a user, in vid order, read a block at a time into one array.

        A server-side cursor: the result never sits whole in the client, and
        each block is converted straight into its rows (a user of 100,000
        1536-d vectors is 600 MB; read at once it took four copies of that).
        """
        out: np.ndarray | None = None
        filled = 0
        with self.conn.cursor(name=f"memsvc_vectors_{next(_savepoints)}", binary=True) as cur:
            cur.execute(
                "SELECT embedding FROM memory_vectors WHERE tenant = %s AND user_id = %s "
                "ORDER BY vid",
                (tenant, user_id),
            )
            while rows := cur.fetchmany(2000):
                block = raw_vectors(row[0] for row in rows)
                if out is None:
                    out = np.zeros((n + spare, block.shape[1] - 1), dtype=np.float32)
                if filled + len(rows) > n:
                    break
                out[filled : filled + len(rows)] = block[:, 1:]
                filled += len(rows)
        if out is None or filled != n:
            raise RuntimeError(f"vectors of {tenant}/{user_id}: found {filled} of {n}")
        return out

    def postings(self, user_key: int, terms: t.Sequence[int]) -> list[tuple[int, int, int, int]]:
        if not terms:
            return []
        return self._rows(
            "SELECT term, seq, tf, dl FROM memory_terms WHERE user_key = %s AND term = ANY(%s)",
            (user_key, list(terms)),
        )

    # -- API keys --------------------------------------------------------------

    def insert_key(self, key: ApiKey, secret_hash: bytes) -> None:
        self.conn.execute(
            f"INSERT INTO api_keys ({KEY_COLUMNS}, secret_hash) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                key.id, key.tenant, key.key_id, key.name, key.created_at, key.last_used_at,
                key.revoked_at, key.rate_limit, key.concurrency_limit, secret_hash,
            ),
        )  # fmt: skip

    def active_keys(self, tenant: str) -> int:
        (n,) = self._one(
            "SELECT count(*) FROM api_keys WHERE tenant = %s AND revoked_at IS NULL", (tenant,)
        )
        return int(n)

    def key_by_hash(self, secret_hash: bytes) -> ApiKey | None:
        row = self._one(
            f"SELECT {KEY_COLUMNS} FROM api_keys WHERE secret_hash = %s", (secret_hash,)
        )
        return key_of(row) if row else None

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self._one(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = %s", (key_id,))
        return key_of(row) if row else None

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        if tenant is None:
            rows = self._rows(
                f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY tenant, created_at, seq"
            )
        else:
            rows = self._rows(
                f"SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant = %s ORDER BY created_at, seq",
                (tenant,),
            )
        return [key_of(row) for row in rows]

    def keys_with_hashes(self, tenant: str | None = None) -> list[tuple[ApiKey, bytes]]:
        where, params = ("WHERE tenant = %s", (tenant,)) if tenant is not None else ("", ())
        rows = self._rows(
            f"SELECT {KEY_COLUMNS}, secret_hash FROM api_keys {where} "
            "ORDER BY tenant, created_at, seq",
            params,
        )
        return [(key_of(row[:-1]), bytes(row[-1])) for row in rows]

    def revoke_key(self, key_id: str, now: int) -> None:
        self.conn.execute(
            "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
            (now, key_id),
        )

    def set_key_limits(
        self, key_id: str, rate_limit: int | None, concurrency_limit: int | None
    ) -> bool:
        cur = self.conn.execute(
            "UPDATE api_keys SET rate_limit = %s, concurrency_limit = %s WHERE id = %s",
            (rate_limit, concurrency_limit, key_id),
        )
        return cur.rowcount == 1

    def touch_key(self, key_id: str, now: int) -> None:
        self.conn.execute("UPDATE api_keys SET last_used_at = %s WHERE id = %s", (now, key_id))

    # -- re-embedding ------------------------------------------------------------

    def start_reembed(self, embedder_id: str) -> None:
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS reembed_staging (seq bigint NOT NULL, "
            '"window" integer NOT NULL, embedder text NOT NULL, embedding vector NOT NULL, '
            'PRIMARY KEY (seq, "window"))'
        )
        self.conn.execute("DELETE FROM reembed_staging WHERE embedder != %s", (embedder_id,))

    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        return [
            (int(seq), content)
            for seq, content in self._rows(
                "SELECT seq, content FROM memories "
                "WHERE seq > (SELECT coalesce(max(seq), 0) FROM reembed_staging) "
                "ORDER BY seq LIMIT %s",
                (limit,),
            )
        ]

    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(
                'INSERT INTO reembed_staging (seq, "window", embedder, embedding) '
                'VALUES (%s, %s, %s, %s) ON CONFLICT (seq, "window") DO UPDATE '
                "SET embedder = excluded.embedder, embedding = excluded.embedding",
                [
                    (seq, w, embedder_id, _f32(vector))
                    for seq, vectors in rows
                    for w, vector in enumerate(vectors)
                ],
            )

    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        self.conn.execute("DROP TABLE memory_vectors")
        for statement in schema.vector_table():
            self.conn.execute(schema.render(statement, dimensions))
        staged = self._rows(
            "SELECT m.seq, m.tenant, m.user_id, count(*) FROM reembed_staging AS s "
            "JOIN memories AS m ON m.seq = s.seq GROUP BY m.seq ORDER BY m.seq"
        )
        # Vector ids go on counting per user, past any given before.
        counters = {
            (tenant, user_id): int(max_vid)
            for tenant, user_id, max_vid in self._rows(
                "SELECT tenant, user_id, max_vid FROM memory_users"
            )
        }
        for seq, tenant, user_id, n in staged:
            first = counters[(tenant, user_id)] + 1
            counters[(tenant, user_id)] = first + n - 1
            self.conn.execute(
                "INSERT INTO memory_vectors (tenant, user_id, vid, embedding) "
                'SELECT %s, %s, %s + "window", embedding FROM reembed_staging WHERE seq = %s',
                (tenant, user_id, first, seq),
            )
            self.conn.execute(
                "UPDATE memories SET first_vid = %s, windows = %s WHERE seq = %s",
                (first, n, seq),
            )
        with self.conn.cursor() as cur:
            cur.executemany(
                "UPDATE memory_users SET max_vid = %s, generation = generation + 1 "
                "WHERE tenant = %s AND user_id = %s",
                [(vid, tenant, user_id) for (tenant, user_id), vid in counters.items()],
            )
        schema.set_meta(self.conn, "embedder", embedder_id)
        schema.set_meta(self.conn, "dimensions", str(dimensions))
        self.conn.execute("DROP TABLE reembed_staging")
        self._erased()


def _f32(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype=np.float32)
