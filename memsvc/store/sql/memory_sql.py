"""The SQL of a tenant's memories, alike on both stores: writes, reads, users.

Each store fills in what differs (:class:`SqlMemories`' abstract methods):
where vectors live and how their ids are given, and how rows come before
a cursor.
"""

from __future__ import annotations

import abc
import json
import typing as t

import numpy as np

from ...models import EndUser
from ...models import Memory
from ...models import Selection
from ...models import Version
from ...models import compact_json
from ...models import dedupe_key
from .. import postings
from ..base import MEMORY_COLUMNS
from ..base import MEMORY_WIDTH
from ..base import dates_text
from ..base import memory_of
from ..conversations import selection_where
from .frame import VISIBLE
from .frame import SqlFrame


class SqlMemories(SqlFrame):
    """A tenant's memories: the statements both stores take alike."""

    # -- the sessions that follow their messages (:class:`~..conversations.ConversationSql`)

    @abc.abstractmethod
    def _sessions_grew(self, memories: t.Iterable[Memory]) -> None:
        """New memories: the sessions of those that are messages count them."""

    @abc.abstractmethod
    def _session_times(self, tenant: str, user_id: str, session_id: str) -> None:
        """A message's time changed: its session's first and last times again."""

    @abc.abstractmethod
    def _session_shrank(self, tenant: str, user_id: str, session_id: str) -> None:
        """A message went: its session counts one fewer (and goes with its last)."""

    @abc.abstractmethod
    def _sessions_erased(self, tenant: str, user_id: str) -> None:
        """Every session of an erased user goes."""

    # -- what follows memories in the job half (:class:`~..job_sql.JobSql`) ----------------

    @abc.abstractmethod
    def _jobs_erased(self, tenant: str, user_id: str) -> None:
        """Every extraction job of an erased user goes."""

    @abc.abstractmethod
    def _source_gone(self, tenant: str, user_id: str, memory_id: str) -> None:
        """A message went: no fact names it among its sources any more."""

    @abc.abstractmethod
    def events(self, seq: int) -> dict[int, str]:
        """How a memory's versions came about, where not by an add or an update."""

    # -- memories: writes -----------------------------------------------------------

    def _insert_records(
        self,
        seqs: t.Sequence[int],
        memories: t.Sequence[Memory],
        first_vids: t.Sequence[int],
        windows: t.Sequence[int],
    ) -> None:
        """The ``memories`` rows of new memories, with the seqs and vector ids they were given.

        Messages count in their sessions.
        """
        marks = ", ".join("?" * (MEMORY_WIDTH + 4))
        self._many(
            f"INSERT INTO memories (seq, {MEMORY_COLUMNS}, first_vid, windows, dedupe_key) "
            f"{self._INSERT_MEMORY} ({marks})",
            [
                (seq, *record_values(m), first, w, dedupe_key(m.content, m.metadata))
                for seq, m, first, w in zip(seqs, memories, first_vids, windows, strict=True)
            ],
        )
        self._sessions_grew(memories)

    def _index(self, memories: t.Iterable[tuple[int, int, str]]) -> None:
        """Add ``(user_key, seq, content)`` to the keyword index."""
        found = postings.of(memories)
        self._many(postings.INSERT, found.rows)
        self._many(
            "UPDATE memory_users SET terms = terms + ? WHERE user_key = ?",
            [(total, key) for key, total in found.totals.items()],
        )

    def _unindex(self, user_key: int, seq: int, content: str) -> None:
        """Remove one memory from the keyword index (SQLite's secure_delete zeroes its bytes)."""
        keys, length = postings.keys_of(user_key, seq, content)
        self._many(postings.DELETE, keys)
        self._execute(
            "UPDATE memory_users SET terms = terms - ? WHERE user_key = ?", (length, user_key)
        )

    def update_memory(
        self, seq: int, previous: Memory, updated: Memory, vectors: np.ndarray | None
    ) -> None:
        tenant, user_id = updated.tenant, updated.user_id
        self._lock_user(tenant, user_id)
        self._execute(
            "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                seq, previous.version, previous.content, compact_json(previous.metadata),
                previous.updated_at,
            ),
        )  # fmt: skip
        self._execute(
            "UPDATE memories SET content = ?, metadata = ?, updated_at = ?, expires_at = ?, "
            "version = ?, dedupe_key = ?, occurred_at = ?, time_offset = ?, dates = ?, "
            "superseded_by = ?, valid_to = ? WHERE seq = ?",
            (
                updated.content, compact_json(updated.metadata), updated.updated_at,
                updated.expires_at, updated.version,
                dedupe_key(updated.content, updated.metadata), updated.occurred_at,
                updated.offset, dates_text(updated.dates), updated.superseded_by,
                updated.valid_to, seq,
            ),
        )  # fmt: skip
        if updated.session_id is not None and updated.time != previous.time:
            self._session_times(tenant, user_id, updated.session_id)
        user_key = self._user_key(tenant, user_id)
        self._execute(
            f"UPDATE memory_users SET last_write = {self._GREATEST}(last_write, ?) "
            "WHERE user_key = ?",
            (updated.updated_at, user_key),
        )
        if vectors is None:
            self._execute(
                "UPDATE memory_users SET updates = updates + 1 WHERE user_key = ?", (user_key,)
            )
            return
        first_vid, windows = self._one(
            "SELECT first_vid, windows FROM memories WHERE seq = ?", (seq,)
        )
        new_first = self._replace_vectors(
            tenant, user_id, user_key, int(first_vid), int(windows), vectors
        )
        self._execute(
            "UPDATE memories SET first_vid = ?, windows = ? WHERE seq = ?",
            (new_first, len(vectors), seq),
        )
        self._unindex(user_key, seq, previous.content)
        self._index([(user_key, seq, updated.content)])
        self._erased()

    @abc.abstractmethod
    def _replace_vectors(
        self,
        tenant: str,
        user_id: str,
        user_key: int,
        first_vid: int,
        windows: int,
        vectors: np.ndarray,
    ) -> int:
        """A memory's vectors replaced by new ones under new ids (and counted: ``deletes``,
        ``max_vid``); returns the first new id."""

    @abc.abstractmethod
    def _delete_vectors(self, tenant: str, user_id: str, first_vid: int, windows: int) -> None:
        """Delete one memory's vectors, ids ``first_vid`` to ``first_vid + windows - 1``."""

    @abc.abstractmethod
    def _erase_user_vectors(self, tenant: str, user_id: str) -> int:
        """Delete every vector of one user at once; returns how many."""

    def _user_erased(self, tenant: str, user_id: str) -> None:
        """The user's last memory went with its vectors: anything of theirs still left goes."""
        return None

    def delete_memory(self, tenant: str, memory_id: str) -> bool:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            "DELETE FROM memories WHERE id = ? AND tenant = ? "
            "RETURNING seq, user_id, first_vid, windows, content, session_id, kind",
            (memory_id, tenant),
        )
        if row is None:
            return False
        seq, user_id, first_vid, windows, content, session_id, kind = row
        self._delete_vectors(tenant, user_id, first_vid, windows)
        if session_id is not None:
            self._session_shrank(tenant, user_id, session_id)
        if kind == "message":
            self._source_gone(tenant, user_id, memory_id)
        user_key = self._user_key(tenant, user_id)
        self._unindex(user_key, seq, content)
        self._execute(
            "UPDATE memory_users SET count = count - 1, deletes = deletes + 1 WHERE user_key = ?",
            (user_key,),
        )
        # A user with no memories left is forgotten, id and all.
        gone = self._one(
            "DELETE FROM memory_users WHERE user_key = ? AND count = 0 RETURNING user_key",
            (user_key,),
        )
        if gone is not None:
            self._user_erased(tenant, user_id)
        self._erased()
        return True

    def delete_user(self, tenant: str, user_id: str) -> int:
        self._lock_user(tenant, user_id)
        self._jobs_erased(tenant, user_id)
        rows = self._rows(
            "DELETE FROM memories WHERE tenant = ? AND user_id = ? RETURNING windows",
            (tenant, user_id),
        )
        if not rows:
            return 0
        erased = self._erase_user_vectors(tenant, user_id)
        expected = sum(w for (w,) in rows)
        if erased != expected:  # the vectors and the records disagree: touch nothing
            raise RuntimeError(f"{tenant}/{user_id}: {erased} vectors for {expected} windows")
        user_key = self._user_key(tenant, user_id)
        self._execute("DELETE FROM memory_terms WHERE user_key = ?", (user_key,))
        self._sessions_erased(tenant, user_id)
        # The user's row goes too: back again, they are a new user (a new key).
        self._execute("DELETE FROM memory_users WHERE user_key = ?", (user_key,))
        self._erased()
        return len(rows)

    def expired(self, now: int, limit: int) -> list[tuple[str, str]]:
        return [
            (tenant, memory_id)
            for tenant, memory_id in self._rows(
                "SELECT tenant, id FROM memories WHERE expires_at <= ? LIMIT ?", (now, limit)
            )
        ]

    # -- memories: reads ------------------------------------------------------------

    def get_memory(self, tenant: str, memory_id: str, now: int) -> Memory | None:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND tenant = ? AND {VISIBLE}",
            (memory_id, tenant, now),
        )
        return memory_of(row) if row else None

    def locate(self, tenant: str, memory_id: str, now: int) -> tuple[int, Memory] | None:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE id = ? AND tenant = ? AND {VISIBLE}",
            (memory_id, tenant, now),
        )
        return (row[0], memory_of(row[1:])) if row else None

    def find_duplicate(self, tenant: str, user_id: str, key: bytes, now: int) -> Memory | None:
        if self._writing:
            self._lock_user(tenant, user_id)
        row = self._one(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
            f"AND dedupe_key = ? AND {VISIBLE} ORDER BY seq LIMIT 1",
            (tenant, user_id, key, now),
        )
        return memory_of(row) if row else None

    @abc.abstractmethod
    def _before(self, created_at: int, seq: int) -> tuple[str, list[t.Any]]:
        """Ordered by (created_at, seq): rows before this one."""

    def page(
        self,
        tenant: str,
        user_id: str,
        now: int,
        *,
        before: tuple[int, int] | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        selection: Selection | None = None,
        admit: t.Callable[[str], dict[str, t.Any] | None] | None = None,
    ) -> t.Iterator[tuple[int, Memory]]:
        where = [f"tenant = ? AND user_id = ? AND {VISIBLE}"]
        params: list[t.Any] = [tenant, user_id, now]
        chosen, values = selection_where(selection)
        where += chosen
        params += values
        if before is not None:
            condition, values = self._before(*before)
            where.append(condition)
            params += values
        if created_after is not None:
            where.append("created_at > ?")
            params.append(created_after)
        if created_before is not None:
            where.append("created_at < ?")
            params.append(created_before)
        for row in self._stream(
            f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, seq DESC",
            params,
        ):
            if admit is None:
                yield row[0], memory_of(row[1:])
                continue
            metadata = admit(row[5])
            if metadata is not None:
                yield row[0], memory_of(row[1:], metadata)

    def users(
        self, tenant: str, now: int, limit: int, *, after: str | None = None, prefix: str = ""
    ) -> list[EndUser]:
        column = f"user_id{self._CODE_POINT_ORDER}"
        # The range of ids that start with prefix: [prefix, upper).
        low, strict = (after, True) if after is not None and after >= prefix else (prefix, False)
        upper = _past_prefix(prefix)
        out: list[EndUser] = []
        while len(out) < limit:
            want = limit - len(out)
            where = [f"tenant = ? AND {column} {'>' if strict else '>='} ?"]
            params: list[t.Any] = [tenant, low]
            if upper is not None:
                where.append(f"{column} < ?")
                params.append(upper)
            rows = self._rows(
                "SELECT user_id, count, last_write FROM memory_users "
                f"WHERE {' AND '.join(where)} ORDER BY {column} LIMIT ?",
                (*params, want),
            )
            expired = self._expired_counts(tenant, [user_id for user_id, _, _ in rows], now)
            for user_id, count, last_write in rows:
                visible = int(count) - expired.get(user_id, 0)
                # A user whose every memory expired is gone already, to callers.
                if visible > 0:
                    out.append(EndUser(user_id, visible, int(last_write)))
            if len(rows) < want:
                break
            low, strict = rows[-1][0], True
        return out

    def _expired_counts(self, tenant: str, user_ids: list[str], now: int) -> dict[str, int]:
        """How many expired (not yet purged) memories each of these users has."""
        counts: dict[str, int] = {}
        for condition, values in self._any("user_id", user_ids):
            for user_id, n in self._rows(
                f"SELECT user_id, count(*) FROM memories{self._BY_EXPIRY} "
                "WHERE expires_at IS NOT NULL AND expires_at <= ? AND tenant = ? "
                f"AND {condition} GROUP BY user_id",
                (now, tenant, *values),
            ):
                counts[user_id] = int(n)
        return counts

    def versions(self, seq: int) -> list[Version]:
        rows = self._rows(
            "SELECT version, content, metadata, at FROM memory_history WHERE memory_seq = ? "
            "ORDER BY version",
            (seq,),
        )
        events = self.events(seq)
        return [
            Version(v, content, json.loads(meta), events.get(v, "add" if v == 1 else "update"), at)
            for v, content, meta, at in rows
        ]


def record_values(m: Memory) -> tuple[t.Any, ...]:
    """A memory's values for the columns :data:`~..base.MEMORY_COLUMNS` names, in order."""
    return (
        m.id, m.tenant, m.user_id, m.content, compact_json(m.metadata), m.created_at,
        m.updated_at, m.expires_at, m.version, m.kind, m.occurred_at, m.offset, m.session_id,
        m.role, m.speaker, m.position, m.message_id, dates_text(m.dates),
        None if m.sources is None else compact_json(list(m.sources)), m.superseded_by,
        m.valid_to,
    )  # fmt: skip


def _past_prefix(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix`` (None: no bound)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            # Surrogates cannot be stored as UTF-8: step over them.
            nxt = 0xE000 if 0xD800 <= last + 1 <= 0xDFFF else last + 1
            return "".join(chars) + chr(nxt)
    return None


def windows_of(
    memories: t.Sequence[Memory], vectors: t.Sequence[np.ndarray] | np.ndarray
) -> tuple[list[np.ndarray], list[int]]:
    """Each memory's vectors (a 2-D array is one per memory) and how many windows it has."""
    if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
        rows = [row[None, :] for row in vectors]
    else:
        rows = list(vectors)
    windows = [len(v) for v in rows]
    if any(w < 1 for w in windows) or len(rows) != len(memories):
        raise ValueError("every memory needs at least one vector")
    return rows, windows
