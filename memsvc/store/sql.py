"""What the two stores share: the SQL that reads the same on SQLite and PostgreSQL, once.

:class:`SqlStore` keeps the :class:`~.base.Store` contract for both: its
transactions, the schema's migration runner and the ``memsvc_meta`` reads
and writes, and every statement both databases take alike (the API keys,
most reads of memories, the frame of an update or a delete). Statements are
written with ``?`` placeholders; PostgreSQL's store turns them into
psycopg's ``%s`` (:meth:`SqlStore._execute`). Each store keeps only what
differs: where vectors live and how their ids are given, how writers of one
user take turns, sets of values in a query (``IN`` or ``= ANY``), and what
each database does for health and erasure.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import json
import typing as t

import numpy as np

from ..models import ApiKey
from ..models import EndUser
from ..models import Memory
from ..models import Selection
from ..models import Version
from ..models import compact_json
from ..models import dedupe_key
from . import postings
from . import schema
from .base import ENTRY_COLUMNS
from .base import KEY_COLUMNS
from .base import MEMORY_COLUMNS
from .base import MEMORY_WIDTH
from .base import Entry
from .base import Store
from .base import UserState
from .base import dates_text
from .base import key_of
from .base import memory_of
from .conversations import ConversationSql
from .conversations import selection_where

#: A migration step: a statement (rendered for the store), or a function of the store.
Step = str | t.Callable[["SqlStore"], None]

# A memory is visible until it expires.
VISIBLE = "(expires_at IS NULL OR expires_at > ?)"

_savepoints = itertools.count()


class Cursor(t.Protocol):
    """What a query answers with, from either driver."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> t.Any: ...

    def fetchall(self) -> list[t.Any]: ...

    def __iter__(self) -> t.Iterator[t.Any]: ...


class SqlStore(ConversationSql, Store):
    """The contract, kept with the SQL both stores share; subclasses fill in the rest."""

    #: Schema version -> its steps, for this store; a new database starts at _FIRST_VERSION.
    _MIGRATIONS: t.ClassVar[dict[int, list[Step]]]
    _FIRST_VERSION: t.ClassVar[int]
    #: Taken inside the migration's transaction so that one process migrates at a time
    #: (SQLite's write lock already does that).
    _MIGRATION_LOCK: t.ClassVar[str | None] = None
    _BEGIN_WRITE: t.ClassVar[str]
    _BEGIN_READ: t.ClassVar[str]
    #: The larger of two values (SQLite's max() of two arguments, PostgreSQL's greatest()).
    _GREATEST: t.ClassVar[str]
    #: The smaller of two values (SQLite's min(), PostgreSQL's least()).
    _LEAST: t.ClassVar[str]
    #: Orders API keys created in the same millisecond: their insertion order.
    _KEY_ORDER: t.ClassVar[str]
    #: ``INSERT INTO memories`` with a given ``seq`` (PostgreSQL: OVERRIDING SYSTEM VALUE).
    _INSERT_MEMORY: t.ClassVar[str] = "VALUES"
    #: Creates the re-embedding's staging table.
    _STAGING_TABLE: t.ClassVar[str]
    #: (kind, name) of every part of the current schema, as :meth:`_schema_objects` lists them.
    _OBJECTS: t.ClassVar[frozenset[tuple[str, str]]]
    #: After a text column: compare it by code point (PostgreSQL: COLLATE "C").
    _CODE_POINT_ORDER: t.ClassVar[str] = ""
    #: After ``FROM memories``: read expired memories through their own index
    #: (SQLite: INDEXED BY, else it may walk a user's every memory).
    _BY_EXPIRY: t.ClassVar[str] = ""

    _writing = False

    # -- what each store says in its own way ----------------------------------------

    @abc.abstractmethod
    def _execute(self, query: str, params: t.Sequence[t.Any] | None = None) -> Cursor:
        """Run one statement written with ``?`` placeholders."""

    @abc.abstractmethod
    def _many(self, query: str, rows: t.Iterable[t.Sequence[t.Any]]) -> None:
        """Run one statement written with ``?`` placeholders once per row."""

    @abc.abstractmethod
    def _any(self, column: str, values: t.Sequence[t.Any]) -> list[tuple[str, list[t.Any]]]:
        """``column`` is one of ``values``: a condition and its parameters per query to run.

        No query at all for no values; SQLite needs one ``?`` per value, so a
        long list takes several.
        """

    @abc.abstractmethod
    def _has_table(self, name: str) -> bool:
        """Whether the database has this table."""

    @abc.abstractmethod
    def _schema_objects(self) -> set[tuple[str, str]]:
        """(kind, name) of what the database has: tables, indexes, functions, extensions..."""

    @abc.abstractmethod
    def _vector(self, vector: np.ndarray) -> t.Any:
        """A float32 vector as the store's driver sends it."""

    def _can_roll_back(self) -> bool:
        return self.in_transaction()

    # -- the helpers every method uses -------------------------------------------------

    def _one(self, query: str, params: t.Sequence[t.Any] | None = None) -> t.Any:
        return self._execute(query, params).fetchone()

    def _rows(self, query: str, params: t.Sequence[t.Any] | None = None) -> list[t.Any]:
        return self._execute(query, params).fetchall()

    def _stream(self, query: str, params: t.Sequence[t.Any] | None) -> t.Iterator[t.Any]:
        """Rows of ``query`` as they come: the caller may stop when it has enough."""
        yield from self._execute(query, params)

    # -- transactions -------------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> t.Iterator[Store]:
        if self.in_transaction():
            name = f"sp{next(_savepoints)}"
            self._execute(f"SAVEPOINT {name}")
            was_writing, self._writing = self._writing, True
            try:
                yield self
            except BaseException:
                # The database may have rolled everything back already (SQLite
                # on a full disk), or the connection may be gone.
                if self._can_roll_back():
                    self._execute(f"ROLLBACK TO SAVEPOINT {name}")
                    self._execute(f"RELEASE SAVEPOINT {name}")
                raise
            finally:
                self._writing = was_writing
            self._execute(f"RELEASE SAVEPOINT {name}")
            return
        self._execute(self._BEGIN_WRITE)
        self._writing = True
        try:
            yield self
        except BaseException:
            self._rollback()
            raise
        finally:
            self._writing = False
        try:
            self._execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    @contextlib.contextmanager
    def read(self) -> t.Iterator[Store]:
        if self.in_transaction():
            yield self
            return
        self._execute(self._BEGIN_READ)
        try:
            yield self
        except BaseException:
            self._rollback()
            raise
        self._execute("COMMIT")

    def _rollback(self) -> None:
        if self._can_roll_back():
            self._execute("ROLLBACK")

    def reset(self) -> None:
        self._writing = False
        self._rollback()

    def _lock_user(self, tenant: str, user_id: str) -> None:
        """Inside a write: make the user's other writers wait until this transaction ends.

        Nothing to do where writers take turns anyway (SQLite: one writer at a time).
        """
        return None

    def _lock_owner(self, tenant: str, memory_id: str) -> None:
        """Inside a write: :meth:`_lock_user` for the user whose memory this is."""
        return None

    # -- schema and meta ------------------------------------------------------------

    def migrate(self, embedder_id: str, dimensions: int) -> None:
        """Create or upgrade the schema in one transaction; a new database records the embedder.

        A database of a newer schema is refused, and changed in no way.
        """
        with self.write():
            if self._MIGRATION_LOCK:
                self._execute(self._MIGRATION_LOCK)
            self._execute(
                "CREATE TABLE IF NOT EXISTS memsvc_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            version = int(self._get_meta("schema_version") or 0)
            if version > schema.SCHEMA_VERSION:
                raise schema.StoreMismatch(
                    f"the database has schema version {version}, newer than this memsvc "
                    f"({schema.SCHEMA_VERSION}); upgrade memsvc"
                )
            if version == 0:
                self._set_meta("embedder", embedder_id)
                self._set_meta("dimensions", str(dimensions))
                version = self._FIRST_VERSION - 1
            recorded_dims = int(self._get_meta("dimensions") or dimensions)
            for step in range(version + 1, schema.SCHEMA_VERSION + 1):
                for statement in self._MIGRATIONS[step]:
                    if callable(statement):
                        statement(self)
                    else:
                        self._execute(self._render(statement, recorded_dims))
                self._set_meta("schema_version", str(step))

    def check_schema(self) -> None:
        missing = self._OBJECTS - self._schema_objects()
        if missing:
            raise schema.IncompleteSchema(missing)

    @abc.abstractmethod
    def _render(self, statement: str, dimensions: int) -> str:
        """A migration statement with the store's values filled in (the vectors' size...)."""

    def embedder(self) -> tuple[str, int] | None:
        if not self._has_table("memsvc_meta"):
            return None
        model = self._get_meta("embedder")
        dims = self._get_meta("dimensions")
        if model is None or dims is None:
            return None
        return model, int(dims)

    def check_embedder(self, embedder_id: str, dimensions: int) -> None:
        schema.check_recorded(self.embedder(), embedder_id, dimensions)

    def _get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM memsvc_meta WHERE key = ?", (key,))
        return row[0] if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self._execute(
            "INSERT INTO memsvc_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def ping(self) -> None:
        self._one("SELECT value FROM memsvc_meta WHERE key = 'schema_version'")

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

    def _user_key(self, tenant: str, user_id: str) -> int:
        (key,) = self._one(
            "SELECT user_key FROM memory_users WHERE tenant = ? AND user_id = ?", (tenant, user_id)
        )
        return int(key)

    def insert_versions(self, seq: int, versions: t.Sequence[Version]) -> None:
        self._many(
            "INSERT INTO memory_history (memory_seq, version, content, metadata, at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(seq, v.version, v.content, compact_json(v.metadata), v.at) for v in versions],
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

    @abc.abstractmethod
    def _erased(self) -> None:
        """Count an erasure (see :meth:`erasures`)."""

    def delete_memory(self, tenant: str, memory_id: str) -> bool:
        self._lock_owner(tenant, memory_id)
        row = self._one(
            "DELETE FROM memories WHERE id = ? AND tenant = ? "
            "RETURNING seq, user_id, first_vid, windows, content, session_id",
            (memory_id, tenant),
        )
        if row is None:
            return False
        seq, user_id, first_vid, windows, content, session_id = row
        self._delete_vectors(tenant, user_id, first_vid, windows)
        if session_id is not None:
            self._session_shrank(tenant, user_id, session_id)
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

    def _where_owner(self, tenant: str | None, user_id: str | None) -> tuple[str, list[t.Any]]:
        where, params = [], []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        return " AND ".join(where) or "1 = 1", params

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

    def count_memories(self, tenant: str | None, user_id: str | None, now: int) -> int:
        where, params = self._where_owner(tenant, user_id)
        (n,) = self._one(
            f"SELECT count(*) FROM memories WHERE {where} AND {VISIBLE}", (*params, now)
        )
        return int(n)

    def all_memories(
        self, tenant: str | None, user_id: str | None, now: int
    ) -> t.Iterator[tuple[int, Memory, int, int]]:
        where, params = self._where_owner(tenant, user_id)
        for row in self._stream(
            f"SELECT seq, {MEMORY_COLUMNS}, first_vid, windows FROM memories "
            f"WHERE {where} AND {VISIBLE} ORDER BY seq",
            (*params, now),
        ):
            end = 1 + MEMORY_WIDTH
            yield row[0], memory_of(row[1:end]), row[end], row[end + 1]

    def existing_ids(self, ids: t.Sequence[str]) -> set[str]:
        found: set[str] = set()
        for condition, params in self._any("id", list(ids)):
            rows = self._rows(f"SELECT id FROM memories WHERE {condition}", params)
            found.update(row[0] for row in rows)
        return found

    def versions(self, seq: int) -> list[Version]:
        rows = self._rows(
            "SELECT version, content, metadata, at FROM memory_history WHERE memory_seq = ? "
            "ORDER BY version",
            (seq,),
        )
        return [
            Version(v, content, json.loads(meta), "add" if v == 1 else "update", at)
            for v, content, meta, at in rows
        ]

    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        found = {}
        for condition, params in self._any("seq", [int(s) for s in seqs]):
            for row in self._rows(
                f"SELECT seq, {MEMORY_COLUMNS} FROM memories WHERE {condition}", params
            ):
                found[row[0]] = memory_of(row[1:])
        return found

    # -- search ---------------------------------------------------------------------

    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        row = self._one(
            "SELECT count, max_vid, deletes, updates, generation, user_key, terms "
            "FROM memory_users WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        )
        return UserState(*(int(v) for v in row)) if row else None

    def memories_if_current(
        self, tenant: str, user_id: str, state: UserState, seqs: t.Sequence[int]
    ) -> dict[int, Memory] | None:
        with self.read():
            if self.user_state(tenant, user_id) != state:
                return None
            return self.memories_by_seq(seqs)

    def entries(self, tenant: str, user_id: str, after_vid: int = 0) -> list[Entry]:
        rows = self._rows(
            f"SELECT {ENTRY_COLUMNS} FROM memories "
            "WHERE tenant = ? AND user_id = ? AND first_vid > ? ORDER BY first_vid",
            (tenant, user_id, after_vid),
        )
        return [Entry(*row) for row in rows]

    def _entries_in(
        self, tenant: str, user_id: str, column: str, values: t.Sequence[int]
    ) -> t.Iterator[Entry]:
        """The user's entries whose ``column`` is one of ``values``."""
        for condition, params in self._any(column, [int(v) for v in values]):
            for row in self._rows(
                f"SELECT {ENTRY_COLUMNS} FROM memories WHERE tenant = ? AND user_id = ? "
                f"AND {condition}",
                (tenant, user_id, *params),
            ):
                yield Entry(*row)

    def entries_by_seq(self, tenant: str, user_id: str, seqs: t.Sequence[int]) -> dict[int, Entry]:
        return {e.seq: e for e in self._entries_in(tenant, user_id, "seq", seqs)}

    def postings(self, user_key: int, terms: t.Sequence[int]) -> list[tuple[int, int, int, int]]:
        found: list[tuple[int, int, int, int]] = []
        for condition, params in self._any("term", list(terms)):
            found += self._rows(
                f"SELECT term, seq, tf, dl FROM memory_terms WHERE user_key = ? AND {condition}",
                (user_key, *params),
            )
        return found

    # -- API keys -------------------------------------------------------------------

    def insert_key(self, key: ApiKey, secret_hash: bytes) -> None:
        self._execute(
            f"INSERT INTO api_keys ({KEY_COLUMNS}, secret_hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key.id, key.tenant, key.key_id, key.name, key.created_at, key.last_used_at,
                key.revoked_at, key.rate_limit, key.concurrency_limit, key.rate_ceiling,
                key.concurrency_ceiling, secret_hash,
            ),
        )  # fmt: skip

    def active_keys(self, tenant: str) -> int:
        (n,) = self._one(
            "SELECT count(*) FROM api_keys WHERE tenant = ? AND revoked_at IS NULL", (tenant,)
        )
        return int(n)

    def key_by_hash(self, secret_hash: bytes) -> ApiKey | None:
        row = self._one(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?", (secret_hash,))
        return key_of(row) if row else None

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self._one(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,))
        return key_of(row) if row else None

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        if tenant is None:
            rows = self._rows(
                f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY tenant, created_at, {self._KEY_ORDER}"
            )
        else:
            rows = self._rows(
                f"SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant = ? "
                f"ORDER BY created_at, {self._KEY_ORDER}",
                (tenant,),
            )
        return [key_of(row) for row in rows]

    def keys_with_hashes(self, tenant: str | None = None) -> list[tuple[ApiKey, bytes]]:
        where, params = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        rows = self._rows(
            f"SELECT {KEY_COLUMNS}, secret_hash FROM api_keys {where} "
            f"ORDER BY tenant, created_at, {self._KEY_ORDER}",
            params,
        )
        return [(key_of(row[:-1]), bytes(row[-1])) for row in rows]

    def revoke_key(self, key_id: str, now: int) -> None:
        self._execute(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (now, key_id),
        )

    def set_key_limits(
        self,
        key_id: str,
        rate_limit: int | None,
        concurrency_limit: int | None,
        *,
        ceiling: bool = False,
    ) -> bool:
        pair = (
            ("rate_ceiling", "concurrency_ceiling")
            if ceiling
            else ("rate_limit", "concurrency_limit")
        )
        columns = ", ".join(f"{column} = ?" for column in pair)
        cur = self._execute(
            f"UPDATE api_keys SET {columns} WHERE id = ?", (rate_limit, concurrency_limit, key_id)
        )
        return cur.rowcount == 1

    def touch_key(self, key_id: str, now: int) -> None:
        self._execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (now, key_id))

    # -- re-embedding ---------------------------------------------------------------
    # New vectors are staged in a plain table, batch by batch, each batch
    # committed: an interrupted run resumes where it stopped, and memory use
    # stays one batch. The switch to them is one transaction at the end.

    def start_reembed(self, embedder_id: str) -> None:
        self._execute(self._STAGING_TABLE)
        # Vectors staged for another model by an earlier run are useless.
        self._execute("DELETE FROM reembed_staging WHERE embedder != ?", (embedder_id,))

    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        return [
            (int(seq), content)
            for seq, content in self._rows(
                "SELECT seq, content FROM memories "
                "WHERE seq > (SELECT coalesce(max(seq), 0) FROM reembed_staging) "
                "ORDER BY seq LIMIT ?",
                (limit,),
            )
        ]

    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        self._many(
            'INSERT INTO reembed_staging (seq, "window", embedder, embedding) '
            'VALUES (?, ?, ?, ?) ON CONFLICT (seq, "window") DO UPDATE '
            "SET embedder = excluded.embedder, embedding = excluded.embedding",
            [
                (seq, w, embedder_id, self._vector(vector))
                for seq, vectors in rows
                for w, vector in enumerate(vectors)
            ],
        )

    def _staged(self) -> list[tuple[int, str, str, int]]:
        """(seq, tenant, user_id, windows) of every memory with staged vectors, by seq."""
        return self._rows(
            "SELECT m.seq, m.tenant, m.user_id, count(*) FROM reembed_staging AS s "
            "JOIN memories AS m ON m.seq = s.seq GROUP BY m.seq ORDER BY m.seq"
        )

    def _switched(self, embedder_id: str, dimensions: int) -> None:
        """The end of :meth:`switch_to_staged`: the new model recorded, the staging gone."""
        self._set_meta("embedder", embedder_id)
        self._set_meta("dimensions", str(dimensions))
        self._execute("DROP TABLE reembed_staging")
        self._erased()  # the old vectors' bytes go (SQLite: at the next checkpoint)


def record_values(m: Memory) -> tuple[t.Any, ...]:
    """A memory's values for the columns :data:`~.base.MEMORY_COLUMNS` names, in order."""
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


def build_postings(store: SqlStore) -> None:
    """Schema 5, on both stores: every memory's terms into ``memory_terms``, a user at a time."""
    users = store._rows("SELECT user_key, tenant, user_id FROM memory_users")
    for user_key, tenant, user_id in users:
        rows = store._rows(
            "SELECT seq, content FROM memories WHERE tenant = ? AND user_id = ?",
            (tenant, user_id),
        )
        found = postings.of([(user_key, seq, content) for seq, content in rows])
        store._many(postings.INSERT, found.rows)
        store._execute(
            "UPDATE memory_users SET terms = ? WHERE user_key = ?",
            (found.totals.get(user_key, 0), user_key),
        )
