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
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
import mmap
import typing as t

import numpy as np

from ..models import ApiKey
from ..models import DateSpan
from ..models import EndUser
from ..models import Memory
from ..models import Selection
from ..models import Session
from ..models import Version

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
ENTRY_COLUMNS = "seq, first_vid, windows, created_at, expires_at, metadata"


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


def block_array(rows: int, dims: int) -> np.ndarray:
    """A float32 ``[rows, dims]`` array in an anonymous memory map of its own.

    For :meth:`Store.vector_blocks`' blocks: the map goes back to the system
    the moment the block is dropped. Blocks from malloc would stay with the
    reading thread's glibc arena: its top is never given back by
    ``malloc_trim``, and up to twice the largest block stays there (a user's
    first load left 17-19 MB of 8 MB blocks in a gunicorn worker).
    """
    buffer = mmap.mmap(-1, max(rows * dims * 4, 1))
    return np.frombuffer(buffer, dtype=np.float32, count=rows * dims).reshape(rows, dims)


@dataclasses.dataclass(frozen=True, slots=True)
class UserState:
    """A user's change counters; any write to their memories changes them.

    ``count`` memories; ``max_vid`` the highest vector id ever given to them
    (new memories, new text); ``deletes`` grows when vectors go (a delete, an
    update of the text); ``updates`` when metadata or expiry alone change;
    ``generation`` when every vector was replaced (re-embedding).

    A user exists while they have memories: ``user_key`` is their number,
    never given to anyone else, so a user erased and back again is a new
    user. ``terms`` is the total length of their texts in terms.
    """

    count: int
    max_vid: int
    deletes: int
    updates: int
    generation: int
    user_key: int
    terms: int


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """A memory as search sees it: where its vectors are, and what filters read."""

    seq: int
    first_vid: int
    windows: int
    created_at: int
    expires_at: int | None
    metadata: str  # JSON, parsed only when a filter needs it


class Store(abc.ABC):
    """memsvc's data over one database connection."""

    #: What this store is, for messages: "SQLite" or "PostgreSQL".
    kind: t.ClassVar[str]
    #: The most rows one :meth:`knn` call returns.
    knn_max: t.ClassVar[int]

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

    @abc.abstractmethod
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""

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
    def check_embedder(self, embedder_id: str, dimensions: int) -> None:
        """:class:`~memsvc.store.schema.StoreMismatch` if the vectors come from another model."""

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
    def refresh_statistics(self) -> None:
        """After a bulk load: let the database plan queries for the data it now holds."""

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
    def insert_versions(self, seq: int, versions: t.Sequence[Version]) -> None:
        """Earlier versions of the memory ``seq`` (an import carries them over)."""

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
    def count_memories(self, tenant: str | None, user_id: str | None, now: int) -> int:
        """Visible memories of a tenant, of a user, or all of them."""

    @abc.abstractmethod
    def all_memories(
        self, tenant: str | None, user_id: str | None, now: int
    ) -> t.Iterator[tuple[int, Memory, int, int]]:
        """Visible memories (of a tenant, of a user), oldest first, with seq and vector ids."""

    def exported(
        self, memories: t.Sequence[tuple[int, Memory, int, int]]
    ) -> list[tuple[np.ndarray, list[Version]]]:
        """Vectors and earlier versions of :meth:`all_memories`' rows, in their order."""
        return [
            (
                self.vectors(m.tenant, m.user_id, np.arange(first, first + windows)),
                self.versions(seq),
            )
            for seq, m, first, windows in memories
        ]

    @abc.abstractmethod
    def existing_ids(self, ids: t.Sequence[str]) -> set[str]:
        """Which of these memory ids exist, in any tenant."""

    @abc.abstractmethod
    def versions_size(self, seq: int) -> int:
        """Bytes of text and metadata of a memory's earlier versions, without reading them."""

    @abc.abstractmethod
    def versions(self, seq: int) -> list[Version]:
        """A memory's earlier versions, oldest first (the current one is the memory)."""

    @abc.abstractmethod
    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        """The memories with these seqs (missing ones are absent)."""

    # -- conversations (:mod:`.conversations`) ------------------------------------

    @abc.abstractmethod
    def next_position(self, tenant: str, user_id: str, session_id: str) -> int:
        """The position the session's next message gets (0 for a new session).

        Inside write(): the user's other writers wait until this transaction ends.
        """

    @abc.abstractmethod
    def messages_by_id(
        self, tenant: str, user_id: str, session_id: str, message_ids: t.Sequence[str]
    ) -> dict[str, tuple[int, Memory]]:
        """The session's messages with these caller ids, with their seqs, expired ones too."""

    @abc.abstractmethod
    def sessions(
        self, tenant: str, user_id: str, now: int, limit: int, after: str | None = None
    ) -> list[Session] | None:
        """A page of the user's sessions, latest message first; None if ``after`` is no session."""

    @abc.abstractmethod
    def session_messages(
        self,
        tenant: str,
        user_id: str,
        session_id: str,
        now: int,
        limit: int,
        after: int | None = None,
    ) -> list[Memory] | None:
        """A page of a session's visible messages by position; None if it is no session."""

    @abc.abstractmethod
    def neighbours(
        self,
        tenant: str,
        user_id: str,
        anchors: t.Sequence[tuple[str, int]],
        n: int,
        now: int,
    ) -> dict[tuple[str, int], tuple[list[Memory], list[Memory]]]:
        """Up to ``n`` visible messages before and after each ``(session_id, position)``."""

    # -- search ----------------------------------------------------------------

    @abc.abstractmethod
    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        """The user's change counters (see :class:`UserState`)."""

    @abc.abstractmethod
    def memories_if_current(
        self, tenant: str, user_id: str, state: UserState, seqs: t.Sequence[int]
    ) -> dict[int, Memory] | None:
        """The user's memories with these seqs if the user's counters still are ``state``.

        None if they changed. Both are read at one instant, as in one read
        transaction: a search answered from a cache as of ``state`` is
        checked and completed with one read (PostgreSQL: one statement).
        """

    #: Whether :meth:`memories_ahead` reads before it is called (PostgreSQL's).
    reads_ahead: t.ClassVar[bool] = False

    def memories_ahead(
        self, tenant: str, user_id: str, state: UserState, candidates: t.Sequence[int] | None
    ) -> Ahead:
        """:meth:`memories_if_current`, asked before the caller knows which memories it wants.

        ``candidates``: every seq the caller may want (None: not known).
        Call what this returns with the seqs wanted, once; close it (it is
        a context manager) in any case. With no seqs wanted, the answer is
        ``{}`` if the counters are ``state``, else None: the counters alone
        are read. A store may start reading the candidates right away,
        while the caller picks among them (:attr:`reads_ahead`): on
        PostgreSQL the statement is under way while a search ranks. Here it
        reads when called.
        """
        return Ahead(self, tenant, user_id, state)

    @abc.abstractmethod
    def entries(self, tenant: str, user_id: str, after_vid: int = 0) -> list[Entry]:
        """A user's memories whose vectors have ids above ``after_vid``, by vector id.

        Expired memories are included: whether one is visible is decided at
        search time, from ``expires_at``.
        """

    @abc.abstractmethod
    def entries_by_seq(self, tenant: str, user_id: str, seqs: t.Sequence[int]) -> dict[int, Entry]:
        """The user's memories with these seqs (others, and missing ones, are absent)."""

    @abc.abstractmethod
    def owners(self, tenant: str, user_id: str, vids: t.Sequence[int]) -> dict[int, Entry]:
        """The memory each of ``vids`` belongs to (a vid with no memory left is absent)."""

    @abc.abstractmethod
    def knn(
        self, tenant: str, user_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float, t.Any]]:
        """The ``k`` (at most :attr:`knn_max`) nearest of a user's vectors.

        ``(vid, cosine distance, vector)``, nearest first, in float32
        arithmetic; ranking them exactly is :mod:`memsvc.search`'s work.
        """

    @abc.abstractmethod
    def vectors(
        self, tenant: str, user_id: str, vids: np.ndarray, spare: int = 0, whole_user: bool = False
    ) -> np.ndarray:
        """The vectors with ids ``vids`` of one user, in that order, plus ``spare`` zero rows.

        ``whole_user``: ``vids`` are all of the user's vectors, ascending.
        """

    @abc.abstractmethod
    def vector_blocks(
        self, tenant: str, user_id: str, vids: np.ndarray
    ) -> t.Iterator[tuple[np.ndarray, np.ndarray]]:
        """All of one user's vectors a block at a time (a few MB), never all at once.

        ``vids`` are all of the user's vector ids, ascending. Yields
        ``(at, rows)``: float32 vectors and their positions in ``vids``,
        every position once over all the blocks, in any order (mostly
        ascending). RuntimeError if the stored vectors are not exactly
        ``vids``. A caller that stops early leaves the read unfinished:
        on PostgreSQL, that cancels it (and so the transaction).
        """

    @abc.abstractmethod
    def postings(self, user_key: int, terms: t.Sequence[int]) -> list[tuple[int, int, int, int]]:
        """``(term, seq, tf, dl)`` of the user's memories holding any of ``terms``.

        ``user_key`` is :attr:`UserState.user_key`, read in the same
        transaction; terms are :mod:`memsvc.terms` hashes. ``tf``: the term's
        count in the memory, ``dl``: the memory's length in terms.
        """

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
    def keys_with_hashes(self, tenant: str | None = None) -> list[tuple[ApiKey, bytes]]:
        """:meth:`list_keys` with each key's secret hash, for an export that moves them."""

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

    # -- re-embedding ------------------------------------------------------------
    # New vectors are staged batch by batch, each batch committed: an
    # interrupted run resumes where it stopped, and memory use stays one
    # batch. The switch to them is one transaction at the end.

    @abc.abstractmethod
    def start_reembed(self, embedder_id: str) -> None: ...

    @abc.abstractmethod
    def unstaged_memories(self, limit: int) -> list[tuple[int, str]]:
        """(seq, content) of memories with no staged vectors yet, oldest first."""

    @abc.abstractmethod
    def stage_vectors(self, embedder_id: str, rows: list[tuple[int, np.ndarray]]) -> None:
        """Stage each memory's new windows' vectors: ``(seq, [windows, dims])``."""

    def has_unstaged(self) -> bool:
        return bool(self.unstaged_memories(1))

    @abc.abstractmethod
    def switch_to_staged(self, embedder_id: str, dimensions: int) -> None:
        """Replace every vector by its staged ones and record the new model."""


class Ahead:
    """What :meth:`Store.memories_ahead` gives: call it with the seqs wanted, once, then close it.

    This one reads when called; a store's own may have its answer under way.
    """

    __slots__ = ("store", "tenant", "user_id", "state")

    def __init__(self, store: Store, tenant: str, user_id: str, state: UserState):
        self.store = store
        self.tenant = tenant
        self.user_id = user_id
        self.state = state

    def __call__(self, seqs: t.Sequence[int]) -> dict[int, Memory] | None:
        if not seqs:  # the counters alone, one statement
            current = self.store.user_state(self.tenant, self.user_id) == self.state
            return {} if current else None
        return self.store.memories_if_current(self.tenant, self.user_id, self.state, seqs)

    def close(self) -> None:
        """Done with it, called or not (an answer under way is read and dropped)."""

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
