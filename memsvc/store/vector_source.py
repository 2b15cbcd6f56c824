"""What search reads from a store: :class:`VectorSource`.

Search (:mod:`memsvc.search`) needs more of a store than the records of
memories: each user's change counters (:class:`UserState`), where each
memory's vectors are and what its filters read (:class:`Entry`,
:class:`Entries`), the vectors themselves (by id, whole, or a block at a
time), a float32 KNN for users too large to cache, the keyword index's
postings, and the winners' records read at one instant with the counters
(:meth:`VectorSource.memories_if_current`). A store implements these beside
:class:`~.base.Store`; search takes nothing else of it.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import mmap
import typing as t

import numpy as np

from ..models import Memory

#: A memory's kind and whether a newer fact superseded it, as one small number
#: (:data:`KIND_CODES` plus :data:`SUPERSEDED`): what a search's scope reads.
MARK = (
    "(CASE kind WHEN 'message' THEN 1 WHEN 'fact' THEN 2 ELSE 0 END"
    " + CASE WHEN superseded_by IS NULL THEN 0 ELSE 4 END)"
)
KIND_CODES = {"memory": 0, "message": 1, "fact": 2}
SUPERSEDED = 4

ENTRY_COLUMNS = (
    "seq, first_vid, windows, created_at, expires_at, "
    f"coalesce(occurred_at, created_at) AS entry_time, {MARK} AS entry_mark, valid_to, metadata"
)


def block_array(rows: int, dims: int) -> np.ndarray:
    """A float32 ``[rows, dims]`` array in an anonymous memory map of its own.

    For :meth:`VectorSource.vector_blocks`' blocks: the map goes back to the
    system the moment the block is dropped. Blocks from malloc would stay
    with the reading thread's glibc arena: its top is never given back by
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
    #: Its time: ``occurredAt``, else ``createdAt`` (epoch ms).
    time: int
    #: Its kind's code (:data:`KIND_CODES`), plus :data:`SUPERSEDED` if a newer fact replaced it.
    mark: int
    valid_to: int | None
    metadata: str  # JSON, parsed only when a filter needs it


@dataclasses.dataclass(frozen=True)
class Entries:
    """Memories as search sees them, a column each: what :class:`Entry` holds, for many.

    A whole user's list is columns, not an object per memory: 100,000
    :class:`Entry` objects (and their rows) took 35 MB while a user loaded,
    and left part of it to the worker for good.
    """

    seqs: np.ndarray  # int64
    first_vid: np.ndarray  # int64
    windows: np.ndarray  # int64
    created: np.ndarray  # int64
    expires: np.ndarray  # int64; 0: never
    times: np.ndarray  # int64: occurredAt, else createdAt
    marks: np.ndarray  # int64: kind code + SUPERSEDED
    valid_to: np.ndarray  # int64; 0: none
    #: JSON texts; equal texts are one object.
    metadata: list[str]

    @classmethod
    def of_rows(cls, rows: t.Iterable[t.Sequence[t.Any]]) -> Entries:
        """From rows of :data:`ENTRY_COLUMNS`, read a batch at a time."""
        chunks: list[np.ndarray] = []
        metadata: list[str] = []
        same: dict[str, str] = {}
        batch: list[tuple[int, ...]] = []
        for row in rows:
            batch.append((row[0], row[1], row[2], row[3], row[4] or 0, row[5], row[6], row[7] or 0))
            metadata.append(same.setdefault(row[8], row[8]))
            if len(batch) == 4096:
                chunks.append(np.array(batch, dtype=np.int64))
                batch = []
        if batch or not chunks:
            chunks.append(np.array(batch, dtype=np.int64).reshape(len(batch), 8))
        table = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        seqs, first, windows, created, expires, times, marks, valid_to = (
            np.ascontiguousarray(table[:, i]) for i in range(8)
        )
        return cls(seqs, first, windows, created, expires, times, marks, valid_to, metadata)

    def __len__(self) -> int:
        return len(self.seqs)

    def __iter__(self) -> t.Iterator[Entry]:
        for i in range(len(self)):
            yield self.entry(i)

    def entry(self, i: int) -> Entry:
        expires, valid_to = int(self.expires[i]), int(self.valid_to[i])
        return Entry(
            int(self.seqs[i]), int(self.first_vid[i]), int(self.windows[i]),
            int(self.created[i]), expires or None, int(self.times[i]), int(self.marks[i]),
            valid_to or None, self.metadata[i],
        )  # fmt: skip

    def take(self, at: np.ndarray) -> Entries:
        """These memories (positions), in this order."""
        return Entries(
            self.seqs[at], self.first_vid[at], self.windows[at], self.created[at],
            self.expires[at], self.times[at], self.marks[at], self.valid_to[at],
            [self.metadata[i] for i in at.tolist()],
        )  # fmt: skip

    def vids(self) -> np.ndarray:
        """The vector ids of these memories, each memory's windows in turn.

        Without an array per memory: for 100,000 memories those took 95 ms
        (this takes 9), and left 8 MB of freed scraps in the thread's arena.
        """
        first, windows = self.first_vid, self.windows
        if bool((windows == 1).all()):  # one window each (most users)
            return first
        total = int(windows.sum())
        return np.repeat(first - (np.cumsum(windows) - windows), windows) + np.arange(total)


class VectorSource(abc.ABC):
    """What search reads of a store: counters, entries, vectors, KNN, postings, records."""

    #: The most rows one :meth:`knn` call returns.
    knn_max: t.ClassVar[int]
    #: Whether :meth:`memories_ahead` reads before it is called (PostgreSQL's).
    reads_ahead: t.ClassVar[bool] = False

    @abc.abstractmethod
    def read(self) -> contextlib.AbstractContextManager[t.Any]:
        """A read transaction: every query in it sees one snapshot."""

    @abc.abstractmethod
    def user_state(self, tenant: str, user_id: str) -> UserState | None:
        """The user's change counters (see :class:`UserState`)."""

    @abc.abstractmethod
    def memories_by_seq(self, seqs: t.Sequence[int]) -> dict[int, Memory]:
        """The memories with these seqs (missing ones are absent)."""

    @abc.abstractmethod
    def memories_if_current(
        self, tenant: str, user_id: str, state: UserState, seqs: t.Sequence[int]
    ) -> dict[int, Memory] | None:
        """The user's memories with these seqs if the user's counters still are ``state``.

        None if they changed. Both are read at one instant, as in one read
        transaction: a search answered from a cache as of ``state`` is
        checked and completed with one read (PostgreSQL: one statement).
        """

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
    def entries(self, tenant: str, user_id: str, after_vid: int = 0) -> Entries:
        """A user's memories whose vectors have ids above ``after_vid``, by vector id.

        Expired memories are included: whether one is visible is decided at
        search time, from ``expires_at``.
        """

    @abc.abstractmethod
    def session_members(
        self,
        tenant: str,
        user_id: str,
        session_ids: t.Sequence[str],
        now: int,
        limit: int,
    ) -> dict[str, list[tuple[int, int]]] | None:
        """Each of these sessions' visible messages as ``(position, seq)``, in position order;
        None if they are more than ``limit`` together."""

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


class Ahead:
    """What :meth:`VectorSource.memories_ahead` gives: call it with the seqs wanted, once,
    then close it.

    This one reads when called; a store's own may have its answer under way.
    """

    __slots__ = ("store", "tenant", "user_id", "state")

    def __init__(self, store: VectorSource, tenant: str, user_id: str, state: UserState):
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
