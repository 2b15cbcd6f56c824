"""A warm search's records on PostgreSQL, asked for before they are ranked (:class:`PgAhead`).

A search answered from a user's cached snapshot reads the user's counters
and the winners' records at one instant (one statement). Sent as soon as
the scan has its candidates, the statement is under way while they are
ranked: the round trip and PostgreSQL's work overlap the ranking. The
statements are prepared by memsvc under names of its own (:data:`AHEAD`).
"""

from __future__ import annotations

import contextlib
import typing as t
import weakref

import psycopg
import psycopg.sql
from psycopg import generators
from psycopg import pq
from psycopg.adapt import Transformer

from ...models import Memory
from ..base import MEMORY_COLUMNS
from ..base import memory_of
from ..vector_source import Ahead
from ..vector_source import UserState
from ..vector_source import VectorSource

_COUNTERS = "u.count, u.max_vid, u.deletes, u.updates, u.generation, u.user_key, u.terms"

#: The statements :class:`PgAhead` sends, prepared by memsvc under names of
#: its own: name -> (parameter types, statement). The counters and the
#: candidates' memories, as ``PgStore.memories_if_current``; or, with no
#: candidates (every one answered before, see memsvc.search), the counters.
AHEAD = {
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
#: which the next use finds out (:class:`PgAhead`).
prepared: weakref.WeakKeyDictionary[psycopg.Connection[t.Any], set[str]] = (
    weakref.WeakKeyDictionary()
)
_MISSING = "26000"  # invalid_sql_statement_name: not prepared (any more)
_THERE = "42P05"  # duplicate_prepared_statement


class PgAhead(Ahead):
    """The memories of a warm search, their statement sent before they are ranked.

    The user's counters and the candidates' rows are asked for at once (one
    statement, one snapshot, as ``PgStore.memories_if_current``), and
    the answer read when called: the round trip and PostgreSQL's work
    overlap the caller's ranking, and the answer is there when it is
    wanted. The statement goes as an execution of the prepared one (Bind,
    Execute, Sync), or where it is not prepared yet as one simple query
    that prepares and executes it: one round trip either way. Should it
    fail for being missing (deallocated meanwhile) or there already, the
    call reads the usual way.
    """

    __slots__ = ("conn", "candidates", "_pending")

    def __init__(
        self,
        store: VectorSource,
        conn: psycopg.Connection[t.Any],
        tenant: str,
        user_id: str,
        state: UserState,
        candidates: t.Sequence[int],
    ):
        """Read the answer to :func:`statement`'s, sent on ``conn`` (by the caller)."""
        super().__init__(store, tenant, user_id, state)
        self.conn = conn
        self.candidates = candidates
        self._pending = True

    def _answer(self) -> list[t.Any] | None:
        """The statement's rows; None if it failed for being missing or there already."""
        self._pending = False
        conn = self.conn
        results = conn.wait(generators.fetch_many(conn.pgconn))
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                error = psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
                if error.sqlstate not in (_MISSING, _THERE):
                    raise error
                name = "memsvc_memories_if_current" if self.candidates else "memsvc_user_state"
                if error.sqlstate == _MISSING:
                    prepared.get(conn, set()).discard(name)
                else:
                    prepared.setdefault(conn, set()).add(name)
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


def statement(tenant: str, user_id: str, candidates: t.Sequence[int]) -> tuple[str, list[str]]:
    """Which of :data:`AHEAD`'s statements a warm search sends, and its (text) parameters."""
    params: list[str] = [tenant, user_id]
    if not candidates:
        return "memsvc_user_state", params
    return "memsvc_memories_if_current", [
        "{" + ",".join(str(int(s)) for s in candidates) + "}",
        *params,
    ]


def send_prepared(conn: psycopg.Connection[t.Any], name: str, params: list[str]) -> None:
    """Send one of :data:`AHEAD`'s statements with these (text) parameters, not waiting.

    Its answer is for the caller to read (:class:`PgAhead`): nothing else
    may use the connection meanwhile.
    """
    pgconn = conn.pgconn
    known = prepared.setdefault(conn, set())
    if name in known:
        encoding = conn.info.encoding
        pgconn.send_query_prepared(name.encode(), [p.encode(encoding) for p in params])
    else:
        known.add(name)
        types, statement = AHEAD[name]
        pgconn.send_query(
            psycopg.sql.SQL("PREPARE {name} ({types}) AS {statement}; EXECUTE {name} ({params})")
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
