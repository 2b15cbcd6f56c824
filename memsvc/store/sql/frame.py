"""The frame of the SQL both stores share: statements, transactions, the schema and its meta.

:class:`SqlFrame` is what every SQL part of a store stands on: the driver
hooks each store fills in (a statement written with ``?`` placeholders,
sets of values, the driver's vectors), the helpers every statement goes
through, transactions and savepoints, the migration runner and the
``memsvc_meta`` reads and writes. The parts (:mod:`.memory_sql`,
:mod:`.key_sql`, :mod:`.search_sql`, :mod:`.bulk_sql`) each add one job's
statements; :class:`~memsvc.store.sql.SqlStore` is all of them.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import typing as t

import numpy as np

from .. import schema
from ..base import FullStore
from ..base import Store

#: A migration step: a statement (rendered for the store), or a function of the store.
Step = str | t.Callable[["SqlFrame"], None]

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


class SqlFrame(FullStore):
    """The statements, transactions and schema every SQL part of a store goes through."""

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

    @abc.abstractmethod
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""

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

    def _user_key(self, tenant: str, user_id: str) -> int:
        (key,) = self._one(
            "SELECT user_key FROM memory_users WHERE tenant = ? AND user_id = ?", (tenant, user_id)
        )
        return int(key)

    @abc.abstractmethod
    def _erased(self) -> None:
        """Count an erasure (see :meth:`erasures`)."""
