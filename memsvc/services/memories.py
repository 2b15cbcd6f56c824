"""Memories: add, search, list, fetch, update, delete and erase, within one tenant.

Each function takes plain values and opens its own transaction (a read of
one statement needs none: a statement sees one snapshot). Embedding
happens before a write transaction starts (a model may be slow, and a
provider's failure must leave nothing behind); the write then commits the
record, its vectors, its keyword index rows and its history together.
"""

from __future__ import annotations

import dataclasses
import typing as t
import uuid

from .. import clock
from ..embeddings import Embedder
from ..embeddings.windows import document_vectors
from ..embeddings.windows import query_vector
from ..errors import BadRequest
from ..errors import NotFound
from ..errors import PayloadTooLarge
from ..models import DateSpan
from ..models import EndUser
from ..models import Memory
from ..models import Moment
from ..models import ScoredMemory
from ..models import Selection
from ..models import Version
from ..models import compact_json
from ..models import dedupe_key
from ..observability import tracing
from ..search import Scope
from ..search import SearchCache
from ..search import SearchRequest
from ..search import search as search_memories
from ..search.filters import Filter
from ..search.filters import MetadataBudget
from ..store import FullStore
from ..store import Store
from ..store import VectorSource
from . import timing


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: An update field that was not given (``None`` is a value: "clear it").
UNSET: t.Any = _Unset()


def _not_found() -> NotFound:
    return NotFound("Memory not found")


def add(
    store: Store,
    embedder: Embedder,
    tenant: str,
    user_id: str,
    content: str,
    metadata: dict[str, t.Any],
    *,
    expires_at: int | None = None,
    dedupe: bool = False,
    occurred_at: Moment | None = None,
) -> Memory:
    """Embed and store a memory; it is committed, with its vectors, on return.

    With ``dedupe``, a memory of this user with the same trimmed text and
    metadata is returned instead, and nothing new is stored. ``occurred_at``:
    when it happened, if not when it is added.
    """
    key = dedupe_key(content, metadata) if dedupe else None
    if key is not None:
        with store.read():
            existing = store.find_duplicate(tenant, user_id, key, clock.now_ms())
        if existing is not None:
            return existing
    (vectors,) = document_vectors(embedder, [content])
    now = clock.now_ms()
    memory = Memory(
        id=str(uuid.uuid4()),
        tenant=tenant,
        user_id=user_id,
        content=content,
        metadata=metadata,
        created_at=now,
        updated_at=now,
        expires_at=expires_at,
        occurred_at=None if occurred_at is None else occurred_at.ms,
        offset=None if occurred_at is None else occurred_at.offset,
        dates=timing.dates_of(content, occurred_at or Moment(now)),
    )
    with store.write():
        if key is not None:
            # Added by another call while this one was embedding?
            existing = store.find_duplicate(tenant, user_id, key, now)
            if existing is not None:
                return existing
        store.insert_memories([memory], [vectors])
    return memory


def threshold_for(mode: str, given: float | None, default: float) -> float:
    """The similarity floor of a search: the one given, else ``default``; none for keyword.

    A keyword match is its own criterion: a search for a word a memory holds
    finds it whatever its cosine, unless the caller sets a floor.
    """
    if given is not None:
        return given
    return 0.0 if mode == "keyword" else default


def search(
    store: VectorSource,
    embedder: Embedder,
    tenant: str,
    user_id: str,
    query: str,
    limit: int,
    threshold: float,
    cache: SearchCache | None = None,
    *,
    filter: Filter | None = None,
    created_after: int | None = None,
    created_before: int | None = None,
    mode: str = "semantic",
    max_filter_bytes: int | None = None,
    selection: Selection | None = None,
    interval: DateSpan | None = None,
    time_on: bool = False,
) -> list[ScoredMemory]:
    """The ``limit`` best memories for ``query`` with similarity >= ``threshold``.

    ``semantic`` (the default): the most similar, exactly, with or without a
    ``cache``; ``keyword``: full-text matches of the query's words, best
    first; ``hybrid``: both rankings fused. Similarity is always the cosine
    similarity, clamped into [0, 1]. Only memories that pass ``filter`` and
    were created inside the bounds compete; the filter reads at most
    ``max_filter_bytes`` of metadata (:class:`~memsvc.search.filters.MetadataBudget`).
    ``selection``: kinds, time bounds, as of when, superseded facts or not.
    ``interval``: the time the query names (:func:`.timing.query_time`):
    memories inside it rank higher in hybrid mode, and in the other modes
    with ``time_on``.
    """
    vector = query_vector(embedder, query)
    scope = Scope(
        clock.now_ms(), filter, created_after, created_before, _budget(max_filter_bytes),
        selection or Selection(),
    )  # fmt: skip
    request = SearchRequest(
        tenant, user_id, vector, query, limit, threshold, scope, mode, interval, time_on,
        embed=lambda text: query_vector(embedder, text),
    )  # fmt: skip
    with tracing.span("search", mode=mode):
        return search_memories(store, cache, request)


def get_all(
    store: Store,
    tenant: str,
    user_id: str,
    limit: int,
    *,
    cursor: str | None = None,
    filter: Filter | None = None,
    created_after: int | None = None,
    created_before: int | None = None,
    selection: Selection | None = None,
    max_bytes: int | None = None,
    max_filter_bytes: int | None = None,
) -> list[Memory]:
    """A page of a user's memories, newest first, after the memory ``cursor`` if given.

    :raises PayloadTooLarge: the page would take more than ``max_bytes`` (its
        text and metadata), checked as rows are read, so a huge page is
        never built.
    :raises BadRequest: the ``filter`` would read more than ``max_filter_bytes``
        of metadata to fill the page.
    """
    now = clock.now_ms()
    out: list[Memory] = []
    with store.read():
        before = None
        if cursor is not None:
            found = store.locate(tenant, cursor, now)
            if found is None or found[1].user_id != user_id:
                raise BadRequest(
                    "Invalid input: cursor: no memory of this user has this id (its memory "
                    "may have been deleted or have expired); list again from the start"
                )
            seq, memory = found
            before = (memory.created_at, seq)
        for _, memory in store.page(
            tenant,
            user_id,
            now,
            before=before,
            created_after=created_after,
            created_before=created_before,
            selection=selection,
            admit=_admit(filter, max_filter_bytes),
        ):
            out.append(memory)
            if max_bytes is not None:
                max_bytes -= _size(memory.content, memory.metadata)
                if max_bytes < 0:
                    raise _too_large()
            if len(out) == limit:
                break
    return out


def _budget(max_filter_bytes: int | None) -> MetadataBudget:
    return MetadataBudget() if max_filter_bytes is None else MetadataBudget(max_filter_bytes)


def _admit(
    filter: Filter | None, max_filter_bytes: int | None
) -> t.Callable[[str], dict[str, t.Any] | None] | None:
    """What a listing with ``filter`` keeps of each memory's metadata text (None: every one)."""
    if not filter:
        return None
    budget = _budget(max_filter_bytes)
    return lambda text: filter.parse_if_matches(text, budget)


def _size(content: str, metadata: dict[str, t.Any]) -> int:
    """About what a memory takes in an answer (at least its text and metadata)."""
    return len(content) + len(compact_json(metadata)) + 200


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(
        "Answer too large: this call's answer would exceed what one request may return "
        "(MEMSVC_MAX_RESPONSE_BYTES); ask for fewer memories (limit) and page with cursor"
    )


def users(
    store: Store, tenant: str, limit: int, *, cursor: str | None = None, prefix: str = ""
) -> list[EndUser]:
    """A page of the tenant's end users with a visible memory, by id in code-point order.

    ``cursor``: the last user id of the previous page (it need not still be
    a user: the page starts after its place in the order). ``prefix``: only
    ids that start with it.
    """
    with store.read():
        return store.users(tenant, clock.now_ms(), limit, after=cursor, prefix=prefix)


def _mine(memory: Memory | None, user_id: str | None) -> bool:
    """Visible, and of ``user_id`` when one is given."""
    return memory is not None and (user_id is None or memory.user_id == user_id)


def get(store: Store, tenant: str, memory_id: str, *, user_id: str | None = None) -> Memory:
    """The memory, or :class:`NotFound` (also when ``user_id`` is given and it is another's).

    One statement, which sees one snapshot of the store by itself: no
    transaction around it (on PostgreSQL one round trip instead of three).
    """
    memory = store.get_memory(tenant, memory_id, clock.now_ms())
    if memory is None or not _mine(memory, user_id):
        raise _not_found()
    return memory


def update(
    store: Store,
    embedder: Embedder,
    tenant: str,
    memory_id: str,
    *,
    user_id: str | None = None,
    content: t.Any = UNSET,
    metadata: t.Any = UNSET,
    expires_at: t.Any = UNSET,
    occurred_at: t.Any = UNSET,
) -> Memory:
    """Change a memory's text, metadata, expiry or time; the version before goes to its history.

    New text gets new vectors in the same transaction. ``metadata=None``
    clears it to ``{}``, ``expires_at=None`` removes the expiry,
    ``occurred_at=None`` its own time (its time is then its ``createdAt``).
    ``createdAt`` and ``id`` never change. Its dates are resolved again when
    its text or time changes.
    """
    vectors = document_vectors(embedder, [content])[0] if content is not UNSET else None
    with store.write():
        now = clock.now_ms()
        found = store.locate(tenant, memory_id, now)
        if found is None or not _mine(found[1], user_id):
            raise _not_found()
        seq, previous = found
        updated = dataclasses.replace(
            previous,
            content=previous.content if content is UNSET else content,
            metadata=previous.metadata if metadata is UNSET else (metadata or {}),
            expires_at=previous.expires_at if expires_at is UNSET else expires_at,
            # Strictly after the version it replaces, even within one millisecond.
            updated_at=max(now, previous.updated_at + 1),
            version=previous.version + 1,
        )
        if occurred_at is not UNSET:
            updated = dataclasses.replace(
                updated,
                occurred_at=None if occurred_at is None else occurred_at.ms,
                offset=None if occurred_at is None else occurred_at.offset,
            )
        if content is not UNSET or occurred_at is not UNSET:
            when = Moment(updated.time, updated.offset)
            updated = dataclasses.replace(updated, dates=timing.dates_of(updated.content, when))
        store.update_memory(seq, previous, updated, vectors)
    return updated


def history(
    store: Store,
    tenant: str,
    memory_id: str,
    *,
    user_id: str | None = None,
    max_bytes: int | None = None,
) -> list[Version]:
    """A memory's versions, oldest first; the last is the current one.

    :raises PayloadTooLarge: the versions take more than ``max_bytes``.
    """
    with store.read():
        found = store.locate(tenant, memory_id, clock.now_ms())
        if found is None or not _mine(found[1], user_id):
            raise _not_found()
        seq, memory = found
        if max_bytes is not None and store.versions_size(seq) > max_bytes:
            raise _too_large()
        earlier = store.versions(seq)
        event = t.cast(FullStore, store).events(seq).get(memory.version)
    event = event or ("add" if memory.version == 1 else "update")
    return [
        *earlier,
        Version(memory.version, memory.content, memory.metadata, event, memory.updated_at),
    ]


def delete(store: Store, tenant: str, memory_id: str, *, user_id: str | None = None) -> None:
    with store.write():
        if not _mine(store.get_memory(tenant, memory_id, clock.now_ms()), user_id):
            raise _not_found()
        store.delete_memory(tenant, memory_id)


def delete_all(store: Store, tenant: str, user_id: str, cache: SearchCache | None = None) -> int:
    """Erase one end user: every memory, vector, version and index row; returns how many."""
    with store.write():
        deleted = store.delete_user(tenant, user_id)
    if cache is not None:
        cache.forget(tenant, user_id)
    return deleted


def purge_expired(store: Store, batch: int = 500) -> int:
    """Delete for good memories whose time is up; returns how many.

    They are invisible from the moment they expire; this removes them.
    """
    removed = 0
    while True:
        with store.write():
            due = store.expired(clock.now_ms(), batch)
            for tenant, memory_id in due:
                removed += store.delete_memory(tenant, memory_id)
        if len(due) < batch:
            return removed
