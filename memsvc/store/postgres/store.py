"""The PostgreSQL store: :class:`PgStore`, memsvc's data over one connection.

What it shares with SQLite's is :class:`~memsvc.store.sql.SqlStore`'s; here
is what PostgreSQL does its own way: writers of one user take turns by an
advisory lock, vector ids are counted per user, vectors are pgvector values
in a table of their own, sets of values travel as one array (``= ANY``).
"""

from __future__ import annotations

import functools
import itertools
import json
import typing as t

import numpy as np
import psycopg
from psycopg import pq
from psycopg.pq import TransactionStatus

from ...models import Memory
from ...models import Version
from ..base import MEMORY_COLUMNS
from ..base import memory_of
from ..sql import Cursor
from ..sql import SqlStore
from ..sql import windows_of
from ..vector_source import ENTRY_COLUMNS
from ..vector_source import Ahead
from ..vector_source import Entry
from ..vector_source import UserState
from . import ahead
from . import schema
from . import vector_copy
from .ahead import PgAhead
from .connection import floats_of
from .connection import register_vector

_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

_cursors = itertools.count()


@functools.lru_cache(maxsize=1024)
def _pg(query: str) -> str:
    """A statement written with ``?`` placeholders, in psycopg's ``%s`` style."""
    return query.replace("?", "%s")


class PgStore(SqlStore):
    """memsvc's data in PostgreSQL, over one connection."""

    kind = "PostgreSQL"
    reads_ahead = True
    #: pgvector's exact ordering has no limit of its own; this bounds one fetch.
    knn_max = 4096

    _MIGRATIONS = schema.MIGRATIONS
    _FIRST_VERSION = schema.FIRST_VERSION
    _OBJECTS = schema.OBJECTS
    # Two processes starting at once: one creates, the other finds.
    _MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('memsvc-migrate', 0))"
    # Claims of extraction jobs take turns (each is a few rows): a box's count stays true.
    _CLAIM_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('memsvc-job-claims', 0))"
    _FOR_UPDATE = " FOR UPDATE"
    _BEGIN_WRITE = "BEGIN"
    _BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    _GREATEST = "greatest"
    _LEAST = "least"
    _KEY_ORDER = "seq"
    _CODE_POINT_ORDER = ' COLLATE "C"'
    _INSERT_MEMORY = "OVERRIDING SYSTEM VALUE VALUES"
    _STAGING_TABLE = (
        "CREATE TABLE IF NOT EXISTS reembed_staging (seq bigint NOT NULL, "
        '"window" integer NOT NULL, embedder text NOT NULL, embedding vector NOT NULL, '
        'PRIMARY KEY (seq, "window"))'
    )

    def __init__(self, conn: psycopg.Connection[t.Any]):
        self.conn = conn
        self._writing = False

    # -- what PostgreSQL says in its own way -------------------------------------------

    def _execute(self, query: str, params: t.Sequence[t.Any] | None = None) -> Cursor:
        # Every ? is a placeholder: a statement with one of PostgreSQL's ?
        # operators (jsonb) would go to self.conn itself.
        return self.conn.execute(_pg(query), params)

    def _many(self, query: str, rows: t.Iterable[t.Sequence[t.Any]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(_pg(query), rows)

    def _any(self, column: str, values: t.Sequence[t.Any]) -> list[tuple[str, list[t.Any]]]:
        # One array for any number of values.
        return [(f"{column} = ANY(?)", [list(values)])] if len(values) else []

    def _has_table(self, name: str) -> bool:
        (exists,) = self._one("SELECT to_regclass(?) IS NOT NULL", (name,))
        return bool(exists)

    def _schema_objects(self) -> set[tuple[str, str]]:
        # memsvc's names are unqualified: what counts is in the schema they resolve to.
        rows = self._rows(
            "SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'i' THEN 'index' "
            "WHEN 'S' THEN 'sequence' ELSE c.relkind::text END, c.relname FROM pg_class AS c "
            "WHERE c.relnamespace = current_schema()::regnamespace "
            "UNION ALL SELECT 'function', proname FROM pg_proc "
            "WHERE pronamespace = current_schema()::regnamespace "
            "UNION ALL SELECT 'constraint', conname FROM pg_constraint "
            "WHERE connamespace = current_schema()::regnamespace AND contype = 'f' "
            "UNION ALL SELECT 'extension', extname FROM pg_extension"
        )
        return {(kind, name) for kind, name in rows}

    def _vector(self, vector: np.ndarray) -> np.ndarray:
        return _f32(vector)

    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status in _IN_TRANSACTION

    def _can_roll_back(self) -> bool:
        return not self.conn.closed and self.in_transaction()

    def _stream(self, query: str, params: t.Sequence[t.Any] | None) -> t.Iterator[t.Any]:
        """Rows of ``query`` as they come, a batch at a time (a server-side cursor)."""
        if not self.in_transaction():
            yield from self._rows(query, params)
            return
        with self.conn.cursor(name=f"memsvc_stream_{next(_cursors)}") as cur:
            cur.itersize = 200
            cur.execute(_pg(query), params)
            yield from cur

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
        super().migrate(embedder_id, dimensions)
        # The vector type exists now: send arrays as vectors on this connection.
        register_vector(self.conn)

    def _render(self, statement: str, dimensions: int) -> str:
        return schema.render(statement, dimensions)

    def probe_write(self) -> None:
        if self.in_transaction():
            return
        self.conn.execute("BEGIN")
        try:
            # Waiting on another writer's row lock would prove nothing.
            self.conn.execute("SET LOCAL lock_timeout = '2s'")
            self._set_meta("health", "")
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

    def insert_memories(
        self, memories: t.Sequence[Memory], vectors: t.Sequence[np.ndarray] | np.ndarray
    ) -> list[int]:
        if len(memories) == 0:
            return []
        vectors, windows = windows_of(memories, vectors)
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
        self._insert_records(seqs, memories, first_vids, windows)
        self._many(
            "INSERT INTO memory_vectors (tenant, user_id, vid, embedding) VALUES (%s, %s, %s, %s)",
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
        (last,) = self._one(
            "UPDATE memory_users SET max_vid = max_vid + %s, deletes = deletes + 1 "
            "WHERE user_key = %s RETURNING max_vid",
            (len(vectors), user_key),
        )
        new_first = int(last) - len(vectors) + 1
        self._many(
            "INSERT INTO memory_vectors (tenant, user_id, vid, embedding) VALUES (%s, %s, %s, %s)",
            [(tenant, user_id, new_first + w, _f32(row)) for w, row in enumerate(vectors)],
        )
        return new_first

    def _delete_vectors(self, tenant: str, user_id: str, first_vid: int, windows: int) -> None:
        self._execute(
            "DELETE FROM memory_vectors WHERE tenant = %s AND user_id = %s "
            "AND vid BETWEEN %s AND %s",
            (tenant, user_id, first_vid, first_vid + windows - 1),
        )

    def _erase_user_vectors(self, tenant: str, user_id: str) -> int:
        return self._execute(
            "DELETE FROM memory_vectors WHERE tenant = %s AND user_id = %s", (tenant, user_id)
        ).rowcount

    # -- memories: reads -----------------------------------------------------------

    def _before(self, created_at: int, seq: int) -> tuple[str, list[t.Any]]:
        return "(created_at, seq) < (%s, %s)", [created_at, seq]

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
                "SELECT w.n, v.floats FROM unnest(%s::text[], %s::text[], %s::bigint[]) "
                "WITH ORDINALITY AS w (tenant, user_id, vid, n) JOIN memory_vectors v "
                "ON v.tenant = w.tenant AND v.user_id = w.user_id AND v.vid = w.vid ORDER BY w.n",
                owners,
            )
            rows = cur.fetchall()
        if len(rows) != len(owners[2]):
            raise RuntimeError(f"export: found {len(rows)} of {len(owners[2])} vectors")
        found = floats_of([blob for _, blob in rows])
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

    def versions_size(self, seq: int) -> int:
        (n,) = self._one(
            "SELECT coalesce(sum(octet_length(content) + octet_length(metadata) + 100), 0) "
            "FROM memory_history WHERE memory_seq = %s",
            (seq,),
        )
        return int(n)

    # -- search ----------------------------------------------------------------

    def memories_if_current(
        self, tenant: str, user_id: str, state: UserState, seqs: t.Sequence[int]
    ) -> dict[int, Memory] | None:
        if self.in_transaction():
            return super().memories_if_current(tenant, user_id, state, seqs)
        # One statement sees one snapshot: the counters and the memories as
        # one read transaction would, without its BEGIN and COMMIT (a warm
        # search's one round trip instead of four).
        rows = self._rows(
            "SELECT u.count, u.max_vid, u.deletes, u.updates, u.generation, u.user_key, "
            "u.terms, m.* FROM memory_users AS u LEFT JOIN LATERAL ("
            # By seq alone (the primary key): the counters unchanged, these
            # seqs are the user's memories', as in memories_by_seq.
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE seq = ANY(%s::bigint[])"
            ") AS m ON true WHERE u.tenant = %s AND u.user_id = %s",
            ([int(s) for s in seqs], tenant, user_id),
        )
        if not rows or UserState(*(int(v) for v in rows[0][:7])) != state:
            return None
        return {row[7]: memory_of(row[8:]) for row in rows if row[7] is not None}

    def memories_ahead(
        self, tenant: str, user_id: str, state: UserState, candidates: t.Sequence[int] | None
    ) -> Ahead:
        if (
            candidates is None
            or self.in_transaction()
            or self.conn.pgconn.pipeline_status != pq.PipelineStatus.OFF
        ):
            return Ahead(self, tenant, user_id, state)
        self._send_prepared(*ahead.statement(tenant, user_id, candidates))
        return PgAhead(self, self.conn, tenant, user_id, state, candidates)

    def _send_prepared(self, name: str, params: list[str]) -> None:
        """Send a warm search's statement ahead (:func:`.ahead.send_prepared`)."""
        ahead.send_prepared(self.conn, name, params)

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
        if whole_user:
            return self._whole_user(tenant, user_id, vids, spare)
        with self.conn.cursor(binary=True) as cur:
            cur.execute(
                "SELECT vid, floats FROM memory_vectors "
                "WHERE tenant = %s AND user_id = %s AND vid = ANY(%s)",
                (tenant, user_id, [int(v) for v in vids]),
            )
            rows = cur.fetchall()
        n = len(vids)
        if len(rows) != n:
            raise RuntimeError(f"vectors of {tenant}/{user_id}: found {len(rows)} of {n}")
        found = floats_of([blob for _, blob in rows])
        out = np.zeros((n + spare, found.shape[1] if n else 0), dtype=np.float32)
        where = {int(vid): i for i, (vid, _) in enumerate(rows)}
        out[:n] = found[[where[int(v)] for v in vids]]
        return out

    def _whole_user(self, tenant: str, user_id: str, vids: np.ndarray, spare: int) -> np.ndarray:
        """Every vector of a user, in vid order, streamed by COPY into one array
        (:mod:`.vector_copy`)."""
        return vector_copy.whole_user(self.conn, tenant, user_id, vids, spare)

    def vector_blocks(
        self, tenant: str, user_id: str, vids: np.ndarray
    ) -> t.Iterator[tuple[np.ndarray, np.ndarray]]:
        """:meth:`_whole_user`'s COPY, its vectors handed on about 8 MB at a time, not kept."""
        return vector_copy.vector_blocks(self.conn, tenant, user_id, vids)

    # -- re-embedding ------------------------------------------------------------

    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        self.conn.execute("DROP TABLE memory_vectors")
        for statement in schema.vector_table():
            self.conn.execute(schema.render(statement, dimensions))
        staged = self._staged()
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
        self._many(
            "UPDATE memory_users SET max_vid = %s, generation = generation + 1 "
            "WHERE tenant = %s AND user_id = %s",
            [(vid, tenant, user_id) for (tenant, user_id), vid in counters.items()],
        )
        self._switched(embedder_id, dimensions)


def _f32(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype=np.float32)
