"""Conversations in the store: messages are memories, sessions a table that follows them.

A message is a row of ``memories`` with ``kind = 'message'``, its
``session_id``, ``role``, ``speaker``, ``position`` and the caller's
``message_id``; a session's place in a conversation is unique
(``memories_by_session``), and so is a message id within its session
(``memories_by_message_id``): a retried ingest cannot store a message twice,
even when two calls race. ``memory_sessions`` holds one row per session
(its message count, first and last times, and the next position to give),
changed in the same transaction as its messages, so listing a user's
sessions reads only their rows; the row goes with the session's last
message. The SQL here reads the same on both stores.
"""

from __future__ import annotations

import typing as t

from ..models import Memory
from ..models import Selection
from ..models import Session
from .base import MEMORY_COLUMNS
from .base import memory_of


class _Sql(t.Protocol):
    """What the conversation half needs of its store (:class:`~.sql.SqlStore`'s helpers)."""

    _GREATEST: t.ClassVar[str]
    _LEAST: t.ClassVar[str]
    _CODE_POINT_ORDER: t.ClassVar[str]
    _BY_EXPIRY: t.ClassVar[str]

    def _execute(self, query: str, params: t.Sequence[t.Any] | None = None) -> t.Any: ...

    def _many(self, query: str, rows: t.Iterable[t.Sequence[t.Any]]) -> None: ...

    def _one(self, query: str, params: t.Sequence[t.Any] | None = None) -> t.Any: ...

    def _rows(self, query: str, params: t.Sequence[t.Any] | None = None) -> list[t.Any]: ...

    def _any(self, column: str, values: t.Sequence[t.Any]) -> list[tuple[str, list[t.Any]]]: ...

    def _lock_user(self, tenant: str, user_id: str) -> None: ...

    def _session_times(self, tenant: str, user_id: str, session_id: str) -> None: ...

    def _expired_in_sessions(
        self, tenant: str, user_id: str, session_ids: list[str], now: int
    ) -> dict[str, int]: ...


#: Schema 7, on both stores: what a memory may carry beyond its text (every
#: column empty on an ordinary memory), and the sessions.
CONVERSATIONS = [
    "ALTER TABLE memories ADD COLUMN kind text",
    "ALTER TABLE memories ADD COLUMN occurred_at bigint",
    # The UTC offset, in minutes, its time was given in: the day its
    # "yesterday" means.
    "ALTER TABLE memories ADD COLUMN time_offset integer",
    "ALTER TABLE memories ADD COLUMN session_id text",
    "ALTER TABLE memories ADD COLUMN role text",
    "ALTER TABLE memories ADD COLUMN speaker text",
    "ALTER TABLE memories ADD COLUMN position bigint",
    "ALTER TABLE memories ADD COLUMN message_id text",
    # The text's time expressions, resolved: [[text, start, end], ...] (JSON).
    "ALTER TABLE memories ADD COLUMN dates text",
    # A fact's sources: [memory id, ...] (JSON).
    "ALTER TABLE memories ADD COLUMN sources text",
    "ALTER TABLE memories ADD COLUMN superseded_by text",
    "ALTER TABLE memories ADD COLUMN valid_to bigint",
    """CREATE UNIQUE INDEX memories_by_session ON memories (tenant, user_id, session_id, position)
        WHERE session_id IS NOT NULL""",
    """CREATE UNIQUE INDEX memories_by_message_id
        ON memories (tenant, user_id, session_id, message_id) WHERE message_id IS NOT NULL""",
    """CREATE TABLE memory_sessions (
        tenant text NOT NULL,
        user_id text NOT NULL,
        session_id text NOT NULL,
        messages bigint NOT NULL,
        first_at bigint NOT NULL,
        last_at bigint NOT NULL,
        next_position bigint NOT NULL,
        PRIMARY KEY (tenant, user_id, session_id)
    )""",
    """CREATE INDEX memory_sessions_by_time
        ON memory_sessions (tenant, user_id, last_at, session_id)""",
]

#: The indexes schema 7 adds, as the schema check names them.
CONVERSATION_INDEXES = ("memories_by_session", "memories_by_message_id", "memory_sessions_by_time")

#: A message's time, in SQL.
_TIME = "coalesce(occurred_at, created_at)"
_VISIBLE = "(expires_at IS NULL OR expires_at > ?)"


def selection_where(selection: Selection | None) -> tuple[list[str], list[t.Any]]:
    """SQL conditions (and their parameters) of :meth:`Selection.admits`, for ``memories``."""
    if selection is None or selection.everything:
        return ["superseded_by IS NULL"], []
    where: list[str] = []
    params: list[t.Any] = []
    if selection.kinds is not None:
        kinds = sorted(selection.kinds - {"memory"})
        either = [f"kind IN ({', '.join('?' * len(kinds))})"] if kinds else []
        if "memory" in selection.kinds:
            either.append("kind IS NULL")
        where.append(f"({' OR '.join(either)})")
        params += kinds
    if selection.occurred_after is not None:
        where.append(f"{_TIME} > ?")
        params.append(selection.occurred_after)
    if selection.occurred_before is not None:
        where.append(f"{_TIME} < ?")
        params.append(selection.occurred_before)
    if selection.as_of is not None:
        where.append(f"{_TIME} <= ?")
        params.append(selection.as_of)
        if not selection.include_superseded:
            where.append("(valid_to IS NULL OR valid_to > ?)")
            params.append(selection.as_of)
    elif not selection.include_superseded:
        where.append("superseded_by IS NULL")
    return where, params


class ConversationSql:
    """The conversation half of :class:`~.sql.SqlStore`: sessions kept with their messages."""

    # -- kept in the transactions that change messages ---------------------------

    def _sessions_grew(self: _Sql, memories: t.Iterable[Memory]) -> None:
        """New messages were inserted: their sessions' rows counted up (or created)."""
        grown: dict[tuple[str, str, str], list[int]] = {}
        for m in memories:
            if m.session_id is None:
                continue
            key = (m.tenant, m.user_id, m.session_id)
            seen = grown.get(key)
            position = m.position if m.position is not None else -1
            if seen is None:
                grown[key] = [1, m.time, m.time, position + 1]
            else:
                seen[0] += 1
                seen[1] = min(seen[1], m.time)
                seen[2] = max(seen[2], m.time)
                seen[3] = max(seen[3], position + 1)
        if not grown:
            return
        least, greatest = self._LEAST, self._GREATEST
        self._many(
            "INSERT INTO memory_sessions (tenant, user_id, session_id, messages, first_at, "
            "last_at, next_position) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, user_id, session_id) DO UPDATE SET "
            "messages = memory_sessions.messages + excluded.messages, "
            f"first_at = {least}(memory_sessions.first_at, excluded.first_at), "
            f"last_at = {greatest}(memory_sessions.last_at, excluded.last_at), "
            f"next_position = {greatest}(memory_sessions.next_position, excluded.next_position)",
            [(*key, *values) for key, values in grown.items()],
        )

    def _session_shrank(self: _Sql, tenant: str, user_id: str, session_id: str) -> None:
        """A message of this session went: one fewer, its times read again; the last takes the
        row with it."""
        gone = self._one(
            "DELETE FROM memory_sessions WHERE tenant = ? AND user_id = ? AND session_id = ? "
            "AND messages <= 1 RETURNING session_id",
            (tenant, user_id, session_id),
        )
        if gone is None:
            self._execute(
                "UPDATE memory_sessions SET messages = messages - 1 "
                "WHERE tenant = ? AND user_id = ? AND session_id = ?",
                (tenant, user_id, session_id),
            )
            self._session_times(tenant, user_id, session_id)

    def _session_times(self: _Sql, tenant: str, user_id: str, session_id: str) -> None:
        """A session's first and last times, read again from its messages."""
        self._execute(
            f"UPDATE memory_sessions SET first_at = (SELECT min({_TIME}) FROM memories AS m "
            "WHERE m.tenant = memory_sessions.tenant AND m.user_id = memory_sessions.user_id "
            "AND m.session_id = memory_sessions.session_id), "
            f"last_at = (SELECT max({_TIME}) FROM memories AS m "
            "WHERE m.tenant = memory_sessions.tenant AND m.user_id = memory_sessions.user_id "
            "AND m.session_id = memory_sessions.session_id) "
            "WHERE tenant = ? AND user_id = ? AND session_id = ?",
            (tenant, user_id, session_id),
        )

    def _sessions_erased(self: _Sql, tenant: str, user_id: str) -> None:
        self._execute(
            "DELETE FROM memory_sessions WHERE tenant = ? AND user_id = ?", (tenant, user_id)
        )

    # -- what ingest reads, inside its write --------------------------------------

    def next_position(self: _Sql, tenant: str, user_id: str, session_id: str) -> int:
        """The position the session's next message gets (0 for a new session).

        Inside write(): the user's other writers wait until this transaction
        ends, so two ingests into one session never take the same positions.
        """
        self._lock_user(tenant, user_id)
        row = self._one(
            "SELECT next_position FROM memory_sessions "
            "WHERE tenant = ? AND user_id = ? AND session_id = ?",
            (tenant, user_id, session_id),
        )
        return 0 if row is None else int(row[0])

    def messages_by_id(
        self: _Sql, tenant: str, user_id: str, session_id: str, message_ids: t.Sequence[str]
    ) -> dict[str, tuple[int, Memory]]:
        """The session's messages with these caller ids, with their seqs, expired ones too."""
        found: dict[str, tuple[int, Memory]] = {}
        for condition, params in self._any("message_id", list(message_ids)):
            for row in self._rows(
                f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                f"AND session_id = ? AND {condition}",
                (tenant, user_id, session_id, *params),
            ):
                memory = memory_of(row[1:])
                assert memory.message_id is not None
                found[memory.message_id] = (row[0], memory)
        return found

    # -- reads ---------------------------------------------------------------------

    def sessions(
        self: _Sql, tenant: str, user_id: str, now: int, limit: int, after: str | None = None
    ) -> list[Session] | None:
        """Up to ``limit`` of the user's sessions, the latest message first, after ``after``.

        Ties in time go by session id. None if ``after`` is no session of the user.
        """
        where, params = "", []
        if after is not None:
            row = self._one(
                "SELECT last_at FROM memory_sessions "
                "WHERE tenant = ? AND user_id = ? AND session_id = ?",
                (tenant, user_id, after),
            )
            if row is None:
                return None
            where = (
                f" AND (last_at < ? OR (last_at = ? AND session_id{self._CODE_POINT_ORDER} > ?))"
            )
            params = [row[0], row[0], after]
        out: list[Session] = []
        while len(out) < limit:
            want = limit - len(out)
            rows = self._rows(
                "SELECT session_id, messages, first_at, last_at FROM memory_sessions "
                f"WHERE tenant = ? AND user_id = ?{where} "
                f"ORDER BY last_at DESC, session_id{self._CODE_POINT_ORDER} LIMIT ?",
                (tenant, user_id, *params, want),
            )
            expired = self._expired_in_sessions(tenant, user_id, [r[0] for r in rows], now)
            for session_id, messages, first_at, last_at in rows:
                visible = int(messages) - expired.get(session_id, 0)
                # A session whose every message expired is gone already, to callers.
                if visible > 0:
                    out.append(Session(session_id, visible, int(first_at), int(last_at)))
            if len(rows) < want:
                break
            last = rows[-1]
            where = (
                f" AND (last_at < ? OR (last_at = ? AND session_id{self._CODE_POINT_ORDER} > ?))"
            )
            params = [last[3], last[3], last[0]]
        return out

    def _expired_in_sessions(
        self: _Sql, tenant: str, user_id: str, session_ids: list[str], now: int
    ) -> dict[str, int]:
        """How many expired (not yet purged) messages each of these sessions has."""
        counts: dict[str, int] = {}
        for condition, values in self._any("session_id", session_ids):
            for session_id, n in self._rows(
                f"SELECT session_id, count(*) FROM memories{self._BY_EXPIRY} "
                "WHERE expires_at IS NOT NULL AND expires_at <= ? AND tenant = ? AND user_id = ? "
                f"AND {condition} GROUP BY session_id",
                (now, tenant, user_id, *values),
            ):
                counts[session_id] = int(n)
        return counts

    def session_messages(
        self: _Sql,
        tenant: str,
        user_id: str,
        session_id: str,
        now: int,
        limit: int,
        after: int | None = None,
    ) -> list[Memory] | None:
        """Up to ``limit`` visible messages of a session in position order, after ``after``.

        None if the user has no such session.
        """
        exists = self._one(
            "SELECT 1 FROM memory_sessions WHERE tenant = ? AND user_id = ? AND session_id = ?",
            (tenant, user_id, session_id),
        )
        if exists is None:
            return None
        rows = self._rows(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
            f"AND session_id = ? AND position > ? AND {_VISIBLE} ORDER BY position LIMIT ?",
            (tenant, user_id, session_id, -1 if after is None else after, now, limit),
        )
        return [memory_of(row) for row in rows]

    def session_members(
        self: _Sql,
        tenant: str,
        user_id: str,
        session_ids: t.Sequence[str],
        now: int,
        limit: int,
    ) -> dict[str, list[tuple[int, int]]] | None:
        """Each session's visible messages as ``(position, seq)``, in position order.

        None if they are more than ``limit`` together (the caller does without).
        """
        out: dict[str, list[tuple[int, int]]] = {}
        taken = 0
        for condition, params in self._any("session_id", sorted(set(session_ids))):
            rows = self._rows(
                "SELECT session_id, position, seq FROM memories WHERE tenant = ? AND "
                f"user_id = ? AND {condition} AND {_VISIBLE} "
                "ORDER BY session_id, position LIMIT ?",
                (tenant, user_id, *params, now, limit - taken + 1),
            )
            taken += len(rows)
            if taken > limit:
                return None
            for session_id, position, seq in rows:
                out.setdefault(session_id, []).append((int(position), int(seq)))
        return out

    def neighbours(
        self: _Sql,
        tenant: str,
        user_id: str,
        anchors: t.Sequence[tuple[str, int]],
        n: int,
        now: int,
    ) -> dict[tuple[str, int], tuple[list[Memory], list[Memory]]]:
        """For each ``(session_id, position)``, up to ``n`` visible messages before and after it.

        In position order, the anchor itself never among them.
        """
        places = list(dict.fromkeys(anchors))
        # One read for every anchor's window of positions: messages are
        # numbered without gaps, so the window holds them all unless some
        # were deleted or have expired; only those anchors are read again,
        # a side at a time.
        windows: dict[str, list[Memory]] = {}
        for chunk in (places[i : i + 200] for i in range(0, len(places), 200)):
            ranges = " OR ".join(["(session_id = ? AND position BETWEEN ? AND ?)"] * len(chunk))
            params: list[t.Any] = [tenant, user_id]
            for session_id, position in chunk:
                params += [session_id, position - n, position + n]
            rows = self._rows(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                f"AND ({ranges}) AND {_VISIBLE} ORDER BY position",
                (*params, now),
            )
            for row in rows:
                memory = memory_of(row)
                windows.setdefault(memory.session_id or "", []).append(memory)
        out: dict[tuple[str, int], tuple[list[Memory], list[Memory]]] = {}
        for session_id, position in places:
            near = windows.get(session_id, [])
            before = [m for m in near if position - n <= (m.position or 0) < position]
            after = [m for m in near if position < (m.position or 0) <= position + n]
            if len(before) < n and position - n > 0:
                before = [
                    memory_of(row)
                    for row in reversed(
                        self._rows(
                            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? "
                            "AND user_id = ? AND session_id = ? AND position < ? "
                            f"AND {_VISIBLE} ORDER BY position DESC LIMIT ?",
                            (tenant, user_id, session_id, position, now, n),
                        )
                    )
                ]
            if len(after) < n:
                after = [
                    memory_of(row)
                    for row in self._rows(
                        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                        f"AND session_id = ? AND position > ? AND {_VISIBLE} "
                        "ORDER BY position LIMIT ?",
                        (tenant, user_id, session_id, position, now, n),
                    )
                ]
            out[session_id, position] = (before, after)
        return out
