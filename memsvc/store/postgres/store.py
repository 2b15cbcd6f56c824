"""The PostgreSQL store: :class:`PgStore`, memsvc's data over one connection.

What it shares with SQLite's is :class:`~memsvc.store.sql.SqlStore`'s; here
is what PostgreSQL does its own way: writers of one user take turns by an
advisory lock, vector ids are counted per user, vectors are pgvector values
in a table of their own, sets of values travel as one array (``= ANY``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import struct
import typing as t
import weakref

import numpy as np
import psycopg
import psycopg.sql
from psycopg import generators
from psycopg import pq
from psycopg.adapt import Transformer
from psycopg.pq import TransactionStatus

from ...models import Memory
from ...models import Version
from ..base import ENTRY_COLUMNS
from ..base import MEMORY_COLUMNS
from ..base import Ahead
from ..base import Entry
from ..base import UserState
from ..base import block_array
from ..base import memory_of
from ..sql import Cursor
from ..sql import SqlStore
from ..sql import windows_of
from . import schema
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
        return _PgAhead(self, tenant, user_id, state, candidates)

    def _send_prepared(self, name: str, params: list[str]) -> None:
        """Send one of :data:`_AHEAD`'s statements with these (text) parameters, not waiting.

        Its answer is for the caller to read (:class:`_PgAhead`): nothing
        else may use the connection meanwhile.
        """
        conn = self.conn
        pgconn = conn.pgconn
        prepared = _prepared.setdefault(conn, set())
        if name in prepared:
            encoding = conn.info.encoding
            pgconn.send_query_prepared(name.encode(), [p.encode(encoding) for p in params])
        else:
            prepared.add(name)
            types, statement = _AHEAD[name]
            pgconn.send_query(
                psycopg.sql.SQL(
                    "PREPARE {name} ({types}) AS {statement}; EXECUTE {name} ({params})"
                )
                .format(
                    name=psycopg.sql.Identifier(name),
                    types=psycopg.sql.SQL(types),
                    statement=psycopg.sql.SQL(statement),
                    params=psycopg.sql.SQL(", ").join(map(psycopg.sql.Literal, params)),
                )
                .as_bytes(conn)
            )
        if pgconn.flush():
            conn.wait(generators.send(pgconn))

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
        """Every vector of a user, in vid order, streamed by COPY into one array.

        ``vids`` (ascending) are cut into blocks of :data:`_BLOCK_VECTORS`
        consecutive ids; PostgreSQL sends each block's vectors as one
        value, their ``floats`` end to end (``string_agg``), with how many
        there are; the blocks' bounds cover every possible id, so a vector
        missing or extra anywhere shows in a block's count. ``COPY ... TO
        STDOUT (FORMAT BINARY)`` streams the blocks as they are made, each
        converted by numpy at once (:class:`_VectorBlocks`): the result never
        sits whole in the client as bytes (a user of 100,000 1536-d vectors
        is 600 MB). A message per vector made reading them the client's
        slowest part; blocks of 32 (fewer, larger messages) took half the
        time for 100,000 1536-d vectors (707 ms against 1,422). ``floats``,
        kept in the row, takes PostgreSQL a third of the time ``embedding``
        did (see the schema).
        """
        starts, expected, lows, highs = _blocks_of(vids)
        reader = _VectorBlocks(starts, expected, spare)
        with self.conn.cursor() as cur:
            with cur.copy(_COPY_BLOCKS, (lows, highs, tenant, user_id)) as copy:
                for data in copy:
                    reader.feed(data)
        return reader.finish(f"vectors of {tenant}/{user_id}")

    def vector_blocks(
        self, tenant: str, user_id: str, vids: np.ndarray
    ) -> t.Iterator[tuple[np.ndarray, np.ndarray]]:
        """:meth:`_whole_user`'s COPY, its vectors handed on about 8 MB at a time, not kept."""
        starts, expected, lows, highs = _blocks_of(vids)
        reader = _VectorsHandedOn(starts, expected)
        with self.conn.cursor() as cur:
            with cur.copy(_COPY_BLOCKS, (lows, highs, tenant, user_id)) as copy:
                for data in copy:
                    reader.feed(data)
                    yield from reader.handed()
        reader.finish(f"vectors of {tenant}/{user_id}")
        yield from reader.handed(last=True)

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


_COUNTERS = "u.count, u.max_vid, u.deletes, u.updates, u.generation, u.user_key, u.terms"

#: The statements :class:`_PgAhead` sends, prepared by memsvc under names of
#: its own: name -> (parameter types, statement). The counters and the
#: candidates' memories, as :meth:`PgStore.memories_if_current`; or, with no
#: candidates (every one answered before, see memsvc.search), the counters.
_AHEAD = {
    "memsvc_memories_if_current": (
        "bigint[], text, text",
        f"SELECT {_COUNTERS}, m.seq, m.{MEMORY_COLUMNS.replace(', ', ', m.')} "
        "FROM memory_users AS u LEFT JOIN memories AS m ON m.seq = ANY($1::bigint[]) "
        "WHERE u.tenant = $2 AND u.user_id = $3",
    ),
    "memsvc_user_state": (
        "text, text",
        f"SELECT {_COUNTERS} FROM memory_users AS u WHERE u.tenant = $1 AND u.user_id = $2",
    ),
}
#: Which of them each connection has, as far as memsvc knows: psycopg
#: deallocates every prepared statement after a rollback or a schema change,
#: which the next use finds out (:class:`_PgAhead`).
_prepared: weakref.WeakKeyDictionary[psycopg.Connection[t.Any], set[str]] = (
    weakref.WeakKeyDictionary()
)
_MISSING = "26000"  # invalid_sql_statement_name: not prepared (any more)
_THERE = "42P05"  # duplicate_prepared_statement


class _PgAhead(Ahead):
    """The memories of a warm search, their statement sent before they are ranked.

    The user's counters and the candidates' rows are asked for at once (one
    statement, one snapshot, as :meth:`PgStore.memories_if_current`), and
    the answer read when called: the round trip and PostgreSQL's work
    overlap the caller's ranking, and the answer is there when it is
    wanted. The statement goes as an execution of the prepared one (Bind,
    Execute, Sync), or where it is not prepared yet as one simple query
    that prepares and executes it: one round trip either way. Should it
    fail for being missing (deallocated meanwhile) or there already, the
    call reads the usual way.
    """

    __slots__ = ("candidates", "_pending")

    def __init__(
        self,
        store: PgStore,
        tenant: str,
        user_id: str,
        state: UserState,
        candidates: t.Sequence[int],
    ):
        super().__init__(store, tenant, user_id, state)
        self.candidates = candidates
        params: list[str] = [tenant, user_id]
        if candidates:
            name = "memsvc_memories_if_current"
            params.insert(0, "{" + ",".join(str(int(seq)) for seq in candidates) + "}")
        else:
            name = "memsvc_user_state"
        store._send_prepared(name, params)
        self._pending = True

    def _answer(self) -> list[t.Any] | None:
        """The statement's rows; None if it failed for being missing or there already."""
        self._pending = False
        conn = t.cast(PgStore, self.store).conn
        results = conn.wait(generators.fetch_many(conn.pgconn))
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                error = psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
                if error.sqlstate not in (_MISSING, _THERE):
                    raise error
                name = "memsvc_memories_if_current" if self.candidates else "memsvc_user_state"
                if error.sqlstate == _MISSING:
                    _prepared.get(conn, set()).discard(name)
                else:
                    _prepared.setdefault(conn, set()).add(name)
                return None
        loader = Transformer(conn)
        loader.set_pgresult(results[-1])
        return loader.load_rows(0, results[-1].ntuples, tuple)

    def __call__(self, seqs: t.Sequence[int]) -> dict[int, Memory] | None:
        rows = self._answer() if self._pending else None
        wanted = set(seqs)
        if rows is None or not wanted <= set(self.candidates):
            return super().__call__(seqs)
        if not rows or UserState(*rows[0][:7]) != self.state:
            return None
        if not wanted:
            return {}
        return {row[7]: memory_of(row[8:]) for row in rows if row[7] in wanted}

    def close(self) -> None:
        if self._pending:
            # Unread (the caller failed): read it, so the connection is free
            # again; an error of its own would hide the caller's.
            with contextlib.suppress(psycopg.Error):
                self._answer()


#: Vectors per block of a user's load (:meth:`PgStore._whole_user`).
_BLOCK_VECTORS = 32

#: A user's vectors in blocks (see :meth:`PgStore._whole_user`): each block's
#: number, count and floats, for blocks of ids given by their bounds.
_COPY_BLOCKS = (
    "COPY (SELECT b.n, a.count, a.floats FROM unnest(%s::bigint[], %s::bigint[]) "
    "WITH ORDINALITY AS b (low, high, n) CROSS JOIN LATERAL ("
    "SELECT count(*) AS count, "
    "string_agg(v.floats, ''::bytea ORDER BY v.vid) AS floats "
    "FROM memory_vectors AS v WHERE v.tenant = %s AND v.user_id = %s "
    "AND v.vid BETWEEN b.low AND b.high) AS a) TO STDOUT (FORMAT BINARY)"
)


def _blocks_of(vids: np.ndarray) -> tuple[list[int], list[int], list[int], list[int]]:
    """The blocks of :data:`_COPY_BLOCKS` for ``vids`` (ascending).

    Where each starts, how many vectors it must hold, and its bounds, which
    cover every possible id: a vector missing or extra shows in a count.
    """
    ids = [int(v) for v in vids]
    starts = list(range(0, len(ids), _BLOCK_VECTORS)) or [0]
    lows = [-(2**63)] + [ids[i] for i in starts[1:]]
    highs = [low - 1 for low in lows[1:]] + [2**63 - 1]
    return starts, [min(_BLOCK_VECTORS, len(ids) - i) for i in starts], lows, highs


class _VectorBlocks:
    """A ``COPY ... (FORMAT BINARY)`` of blocks of vectors, into one float32 array.

    The stream: a 19-byte header (and an extension area), then per row a
    2-byte field count (3), each field's 4-byte length and value: the
    block's number (from 1, bigint), how many vectors it holds (bigint) and
    their big-endian float32s end to end (bytea; NULL for none); then a
    2-byte trailer (-1). Block ``i`` goes to ``starts[i - 1]`` and must hold
    ``expected[i - 1]`` vectors. Rows are read wherever the chunks fed end;
    a chunk of whole rows (as PostgreSQL sends them, a message per row) is
    read where it lies, without a copy.
    """

    _HEADER = b"PGCOPY\n\xff\r\n\x00"
    _ROW = struct.Struct(">hiqiqi")  # field count; number; count; the floats' length

    def __init__(self, starts: list[int], expected: list[int], spare: int):
        self.starts = starts
        self.expected = expected
        self.spare = spare
        self.n = sum(expected)
        self.counts: list[int | None] = [None] * len(starts)
        self.out: np.ndarray | None = None
        self.dims = 0  # from the first block
        self._pending = bytearray()
        self._started = False
        self._ended = False

    def feed(self, data: t.Any) -> None:
        if self._pending:
            self._pending += data
            used = self._read(self._pending)
            del self._pending[:used]
        else:
            view = memoryview(data)
            used = self._read(view)
            self._pending += view[used:]

    def finish(self, what: str) -> np.ndarray:
        """The vectors, after checking that every block came whole; ``what`` names them."""
        if not self._ended or self._pending:
            raise RuntimeError("COPY of vectors: the stream did not end as expected")
        found = sum(c or 0 for c in self.counts)
        if found > self.n:
            raise RuntimeError(f"{what}: more than the {self.n} expected")
        if found != self.n or self.counts != self.expected:
            raise RuntimeError(f"{what}: found {found} of {self.n}")
        if self.out is None:
            return np.zeros((self.spare, 0), dtype=np.float32)
        return self.out

    def _read(self, buf: t.Any) -> int:
        """Read the whole rows at the start of ``buf``; how many bytes they took."""
        pos, size = 0, len(buf)
        if not self._started:
            if size < 19:
                return 0
            if bytes(buf[:11]) != self._HEADER:
                raise RuntimeError("COPY of vectors: not PostgreSQL's binary format")
            (extension,) = struct.unpack_from(">I", buf, 15)
            if size < 19 + extension:
                return 0
            pos = 19 + extension
            self._started = True
        while not self._ended and size - pos >= 2:
            (fields,) = struct.unpack_from(">h", buf, pos)
            if fields == -1:
                self._ended = True
                pos += 2
                break
            if size - pos < self._ROW.size:
                break
            fields, len1, number, len2, count, length = self._ROW.unpack_from(buf, pos)
            if (fields, len1, len2) != (3, 8, 8):
                raise RuntimeError("COPY of vectors: a row of another shape")
            end = pos + self._ROW.size + max(length, 0)
            if end > size:
                break
            self._block(number, count, buf, pos + self._ROW.size, length)
            pos = end
        return pos

    def _block(self, number: int, count: int, buf: t.Any, offset: int, length: int) -> None:
        i = number - 1
        if not 0 <= i < len(self.starts) or self.counts[i] is not None:
            raise RuntimeError("COPY of vectors: a block out of place")
        self.counts[i] = count
        if count != self.expected[i] or count == 0:
            return  # finish() says what was found
        dims = self.dims or length // 4 // count
        if length != 4 * dims * count:
            raise RuntimeError("COPY of vectors: a vector of another length")
        self.dims = dims
        rows = np.frombuffer(buf, dtype=">f4", count=count * dims, offset=offset)
        self._take(self.starts[i], rows.reshape(count, dims))

    def _take(self, start: int, rows: np.ndarray) -> None:
        """A block's vectors (big-endian, where the bytes lie), for rows ``start`` on."""
        if self.out is None:
            self.out = np.zeros((self.n + self.spare, self.dims), dtype=np.float32)
        self.out[start : start + len(rows)] = rows


class _VectorsHandedOn(_VectorBlocks):
    """:class:`_VectorBlocks` handing its vectors on about 8 MB at a time, not keeping them."""

    BLOCK_BYTES = 8 << 20

    def __init__(self, starts: list[int], expected: list[int]):
        super().__init__(starts, expected, 0)
        self._at = np.zeros(0, dtype=np.int64)
        self._rows: np.ndarray | None = None
        self._held = 0
        self._ready: list[tuple[np.ndarray, np.ndarray]] = []

    def _take(self, start: int, rows: np.ndarray) -> None:
        count, dims = rows.shape
        if self._rows is not None and self._held + count > len(self._rows):
            self._hand_on()
        if self._rows is None:
            self._rows = block_array(max(self.BLOCK_BYTES // (4 * dims), count), dims)
            self._at = np.empty(len(self._rows), dtype=np.int64)
            self._held = 0
        self._rows[self._held : self._held + count] = rows
        self._at[self._held : self._held + count] = np.arange(start, start + count)
        self._held += count

    def _hand_on(self) -> None:
        if self._rows is not None and self._held:
            self._ready.append((self._at[: self._held], self._rows[: self._held]))
        self._rows = None

    def handed(self, last: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """The blocks filled since the last call: ``(positions, rows)``; ``last``: all the rest."""
        if last:
            self._hand_on()
        ready, self._ready = self._ready, []
        return ready


def _f32(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype=np.float32)
