"""What a store is: the contract the SQLite and PostgreSQL stores both keep.

A memory is written in one transaction: its record (``memories``), one
vector per window of its text (ids ``first_vid .. first_vid + windows - 1``,
never reused), its keyword index rows (:mod:`.postings`), and its user's
change counters (:class:`UserState`), which search caches compare. Earlier versions of a
memory are kept as its history; deleting a memory deletes all of it.

Services see only these methods, taking and returning plain values
(:mod:`memsvc.models`), and open the transactions themselves
(:meth:`Store.write`, :meth:`Store.read`); the methods never commit. Inside
:meth:`Store.write`, a user's memories change in the order their writes
commit: vector ids given to one user only grow, as the search cache's
incremental loads rely on.

:class:`Store` holds a tenant's memories and keys and what every store
must do (transactions, schema, health, erasure). What else memsvc asks of
a store is in parts of its own: :class:`~.sessions.Conversations` (a
user's sessions of messages), :class:`~.vector_source.VectorSource` (what
search reads), :class:`~.bulk.Bulk` (export and import) and
:class:`~.bulk.Reembedding`. A store is all of them: :class:`FullStore`.
"""

from __future__ import annotations

import abc
import contextlib
import json
import typing as t

import numpy as np

from ..models import ApiKey
from ..models import DateSpan
from ..models import EndUser
from ..models import Memory
from ..models import Selection
from ..models import Version
from .bulk import Bulk
from .bulk import Reembedding
from .jobs import Jobs
from .sessions import Conversations
from .vector_source import VectorSource

MEMORY_COLUMNS = (
    "id, tenant, user_id, content, metadata, created_at, updated_at, expires_at, version, "
    "kind, occurred_at, time_offset, session_id, role, speaker, position, message_id, dates, "
    "sources, superseded_by, valid_to"
)
#: How many columns :data:`MEMORY_COLUMNS` names.
MEMORY_WIDTH = MEMORY_COLUMNS.count(",") + 1
KEY_COLUMNS = (
    "id, tenant, key_id, name, created_at, last_used_at, revoked_at, rate_limit, concurrency_limit,"
    " rate_ceiling, concurrency_ceiling"
)


def memory_of(row: t.Sequence[t.Any], metadata: dict[str, t.Any] | None = None) -> Memory:
    """A :class:`Memory` from a row of :data:`MEMORY_COLUMNS` (and its ``metadata``, if parsed)."""
    if metadata is None:
        # Most memories carry no metadata: no parse for those.
        metadata = {} if row[4] == "{}" else json.loads(row[4])
    if row[9] is None and row[10] is None and row[17] is None:
        # An ordinary memory (no kind, time or dates): the fields every memory has.
        return Memory(
            row[0], row[1], row[2], row[3], metadata, row[5], row[6], row[7], row[8]
        )  # fmt: skip
    return Memory(
        row[0], row[1], row[2], row[3], metadata, row[5], row[6], row[7], row[8],
        kind=row[9],
        occurred_at=row[10],
        offset=row[11],
        session_id=row[12],
        role=row[13],
        speaker=row[14],
        position=row[15],
        message_id=row[16],
        dates=None if row[17] is None else dates_of(row[17]),
        sources=None if row[18] is None else tuple(json.loads(row[18])),
        superseded_by=row[19],
        valid_to=row[20],
    )  # fmt: skip


def dates_of(text: str) -> tuple[DateSpan, ...]:
    """A memory's ``dates`` from their stored JSON (:func:`dates_text`)."""
    return tuple(DateSpan(*span) for span in json.loads(text))


def dates_text(dates: t.Sequence[DateSpan] | None) -> str | None:
    """A memory's ``dates`` as stored: ``[[text, start, end], ...]``; None for none."""
    if not dates:
        return None
    return json.dumps([[d.text, d.start, d.end] for d in dates], ensure_ascii=False)


def key_of(row: t.Sequence[t.Any]) -> ApiKey:
    """An :class:`ApiKey` from a row of :data:`KEY_COLUMNS`."""
    return ApiKey(*row)


class Store(abc.ABC):
    """memsvc's data over one database connection."""

    #: What this store is, for messages: "SQLite" or "PostgreSQL".
    kind: t.ClassVar[str]

    # -- transactions ----------------------------------------------------------

    @abc.abstractmethod
    def write(self) -> contextlib.AbstractContextManager[Store]:
        """A write transaction: all of it is committed, or none of it.

        Inside another transaction it is a savepoint: its own part is undone
        on error, and the outer transaction decides about the rest.
        """

    @abc.abstractmethod
    def read(self) -> contextlib.AbstractContextManager[Store]:
        """A read transaction: every query in it sees one snapshot."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Roll back whatever a failed request left open."""

    # -- schema and health -----------------------------------------------------

    @abc.abstractmethod
    def migrate(self, embedder_id: str, dimensions: int) -> None:
        """Create or upgrade the schema, in its own transaction."""

    @abc.abstractmethod
    def check_schema(self) -> None:
        """:class:`~memsvc.store.schema.IncompleteSchema` if a part of the schema is missing.

        A database restored only in part records the current version all the
        same: every table, index, function and extension is looked for.
        """

    @abc.abstractmethod
    def embedder(self) -> tuple[str, int] | None:
        """The (model id, dimensions) the stored vectors come from."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Read from the database; raises if it cannot be read."""

    @abc.abstractmethod
    def probe_write(self) -> None:
        """Write and roll back, to learn whether the database takes writes at all."""

    @abc.abstractmethod
    def checkpoint(self) -> bool:
        """Make erased bytes unrecoverable from the database's own files, where it can.

        Never makes writers wait; False when it could not finish now (try later).
        """

    @abc.abstractmethod
    def erasures(self) -> int:
        """A number that grows whenever a memory is deleted or replaced, by any process."""

    # -- memories: writes (inside write()) -----------------------------------------

    @abc.abstractmethod
    def insert_memories(
        self, memories: t.Sequence[Memory], vectors: t.Sequence[np.ndarray] | np.ndarray
    ) -> list[int]:
        """Insert memories with their vectors and keyword index entries; their seqs.

        ``vectors[i]`` holds memory ``i``'s windows, one row each; a 2-D
        array is one vector per memory. Memories get increasing ``seq`` in
        the order given.
        """

    @abc.abstractmethod
    def update_memory(
        self, seq: int, previous: Memory, updated: Memory, vectors: np.ndarray | None
    ) -> None:
        """Replace a memory's record by ``updated``; its vectors too if ``vectors`` is given.

        ``previous`` (the record as it was) goes to the memory's history.
        """

    @abc.abstractmethod
    def delete_memory(self, tenant: str, memory_id: str) -> bool:
        """Delete a memory, its vectors, history and keyword index entry; False if none."""

    @abc.abstractmethod
    def delete_user(self, tenant: str, user_id: str) -> int:
        """Delete every memory of one end user of one tenant, and the user; returns how many."""

    @abc.abstractmethod
    def expired(self, now: int, limit: int) -> list[tuple[str, str]]:
        """(tenant, id) of up to ``limit`` memories whose time is up."""

    # -- memories: reads (only memories not expired at ``now`` are seen) ---------------

    @abc.abstractmethod
    def get_memory(self, tenant: str, memory_id: str, now: int) -> Memory | None:
        """A visible memory of the tenant. Inside write(), its user's writes wait for ours."""

    @abc.abstractmethod
    def locate(self, tenant: str, memory_id: str, now: int) -> tuple[int, Memory] | None:
        """A visible memory with its ``seq``, for an update or a cursor.

        Inside write(), its user's writes wait until this transaction ends.
        """

    @abc.abstractmethod
    def find_duplicate(self, tenant: str, user_id: str, key: bytes, now: int) -> Memory | None:
        """The user's oldest visible memory with this :func:`~memsvc.models.dedupe_key`.

        Inside write(), the user's other writes wait until this transaction
        ends, so two adds of the same text cannot both find none.
        """

    @abc.abstractmethod
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
        """A user's visible memories newest first, from just after ``before`` on.

        ``before`` is the ``(created_at, seq)`` of the last memory already
        seen; only those ``selection`` admits (None: all but superseded facts).
        ``admit``: given each memory's metadata JSON text, its metadata
        parsed, or None to leave the memory out (a filter, parsing each text
        once). Rows stream: the caller stops when it has enough.
        """

    @abc.abstractmethod
    def users(
        self, tenant: str, now: int, limit: int, *, after: str | None = None, prefix: str = ""
    ) -> list[EndUser]:
        """Up to ``limit`` end users of ``tenant`` with a visible memory, by user id in code-point
        order, after ``after`` (which need not be a user), whose id starts with ``prefix``."""

    @abc.abstractmethod
    def versions_size(self, seq: int) -> int:
        """Bytes of text and metadata of a memory's earlier versions, without reading them."""

    @abc.abstractmethod
    def versions(self, seq: int) -> list[Version]:
        """A memory's earlier versions, oldest first (the current one is the memory)."""

    # -- API keys --------------------------------------------------------------

    @abc.abstractmethod
    def insert_key(self, key: ApiKey, secret_hash: bytes) -> None: ...

    @abc.abstractmethod
    def active_keys(self, tenant: str) -> int: ...

    @abc.abstractmethod
    def key_by_hash(self, secret_hash: bytes) -> ApiKey | None: ...

    @abc.abstractmethod
    def get_key(self, key_id: str) -> ApiKey | None: ...

    @abc.abstractmethod
    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """A tenant's keys, or every key when ``tenant`` is None, oldest first."""

    @abc.abstractmethod
    def revoke_key(self, key_id: str, now: int) -> None:
        """Mark a key revoked; a key already revoked keeps its first time."""

    @abc.abstractmethod
    def set_key_limits(
        self,
        key_id: str,
        rate_limit: int | None,
        concurrency_limit: int | None,
        *,
        ceiling: bool = False,
    ) -> bool:
        """Set the limits its tenant chose, or with ``ceiling`` its operator's; False: no key."""

    @abc.abstractmethod
    def touch_key(self, key_id: str, now: int) -> None: ...


class FullStore(Store, Conversations, Jobs, VectorSource, Bulk, Reembedding):
    """Everything memsvc asks of a store: its memories and keys (:class:`Store`), sessions of
    messages (:class:`~.sessions.Conversations`), what search reads
    (:class:`~.vector_source.VectorSource`), export and import (:class:`~.bulk.Bulk`),
    re-embedding (:class:`~.bulk.Reembedding`). A new store implements each part."""
