"""Conversations: ingest messages as they were said, list sessions, read one back.

A message is a memory of ``kind: "message"`` with its session, role,
speaker, position and time. :func:`ingest` stores a call's messages all
or none, in one transaction, embedded in one batch before it opens; a
message whose caller id its session already holds is not stored again (the
memory stored for it is answered in its place), so a retried call stores
nothing twice.
"""

from __future__ import annotations

import dataclasses
import typing as t
import uuid

from .. import clock
from ..embeddings import Embedder
from ..embeddings.windows import document_vectors
from ..errors import BadRequest
from ..errors import NotFound
from ..models import Job
from ..models import Memory
from ..models import Moment
from ..models import Session
from ..store import FullStore
from . import jobs
from . import timing


@dataclasses.dataclass(frozen=True)
class Message:
    """One message of an ingest call, as validated."""

    role: str
    content: str
    #: Who said it (the message's ``name``).
    speaker: str | None = None
    #: When it was said; None: the previous message's time (the first: the call's).
    at: Moment | None = None
    #: The caller's id of the message, which makes storing it idempotent.
    id: str | None = None


@dataclasses.dataclass(frozen=True)
class Ingested:
    """What :func:`ingest` did: the session, a memory per message in order, and how many were
    already there."""

    session_id: str
    memories: list[Memory]
    duplicates: int
    #: The extraction job queued with the new messages; with none new, the job that reads
    #: them (a call sent again); None without extraction.
    job: Job | None = None


#: How many times an ingest embeds again when a message it took for a
#: duplicate was deleted while it embedded (each time a rarer race).
_ATTEMPTS = 3


def ingest(
    store: FullStore,
    embedder: Embedder,
    tenant: str,
    user_id: str,
    messages: t.Sequence[Message],
    *,
    session_id: str | None = None,
    metadata: dict[str, t.Any] | None = None,
    extract: bool = False,
) -> Ingested:
    """Store ``messages`` in the session (a new one if ``session_id`` is None), all or none.

    Embedding happens before the write transaction opens, and only for the
    messages not already stored; inside it the duplicates are looked for
    again, so two calls racing with the same ids store each message once.
    With ``extract``, a job to draw facts from the new messages is queued
    in the same transaction (:func:`.jobs.queue`).
    """
    now = clock.now_ms()
    session_id = session_id or str(uuid.uuid4())
    times = _times(messages, now)
    metadata = metadata or {}
    ids = [m.id for m in messages if m.id is not None]
    stored: dict[str, tuple[int, Memory]] = {}
    if ids:
        with store.read():
            stored = store.messages_by_id(tenant, user_id, session_id, ids)
    vectors: dict[int, t.Any] = {}
    for _ in range(_ATTEMPTS):
        wanted = _to_store(messages, stored, now)
        missing = [i for i in wanted if i not in vectors]
        if missing:
            embedded = document_vectors(embedder, [messages[i].content for i in missing])
            vectors.update(zip(missing, embedded, strict=True))
        with store.write():
            stored = store.messages_by_id(tenant, user_id, session_id, ids) if ids else {}
            wanted = _to_store(messages, stored, now)
            if any(i not in vectors for i in wanted):
                continue  # a duplicate went meanwhile: embed it, and try again
            for seq_memory in stored.values():
                if not _visible(seq_memory[1], now):
                    # Expired, not yet purged: invisible, so this message is new again.
                    store.delete_memory(tenant, seq_memory[1].id)
            position = store.next_position(tenant, user_id, session_id)
            out, new = [], []
            by_id: dict[str, Memory] = {}
            for i, message in enumerate(messages):
                if message.id is not None and message.id in by_id:
                    out.append(by_id[message.id])
                    continue
                if i not in wanted:
                    out.append(stored[t.cast(str, message.id)][1])
                    continue
                memory = Memory(
                    id=str(uuid.uuid4()),
                    tenant=tenant,
                    user_id=user_id,
                    content=message.content,
                    metadata=metadata,
                    created_at=now,
                    updated_at=now,
                    kind="message",
                    occurred_at=times[i].ms,
                    offset=times[i].offset,
                    session_id=session_id,
                    role=message.role,
                    speaker=message.speaker,
                    position=position,
                    message_id=message.id,
                    dates=timing.dates_of(message.content, times[i]),
                )
                position += 1
                new.append(memory)
                out.append(memory)
                if message.id is not None:
                    by_id[message.id] = memory
            store.insert_memories(new, [vectors[i] for i in wanted])
            job = None
            if extract and new:
                job = jobs.queue(store, tenant, user_id, session_id, new, now)
            elif extract and out:
                # Sent again after its answer was lost: the job that reads these messages.
                job = store.job_reading(tenant, user_id, out[-1].id)
        return Ingested(session_id, out, len(out) - len(new), job)
    raise BadRequest(
        "Invalid input: messages: they changed while being stored (another call deleted "
        "some of them); send the call again"
    )


def _times(messages: t.Sequence[Message], now: int) -> list[Moment]:
    """Each message's time: its own, else the previous message's; the first's, else ``now``."""
    out, previous = [], Moment(now)
    for message in messages:
        previous = message.at or previous
        out.append(previous)
    return out


def _visible(memory: Memory, now: int) -> bool:
    return memory.expires_at is None or memory.expires_at > now


def _to_store(
    messages: t.Sequence[Message], stored: dict[str, tuple[int, Memory]], now: int
) -> list[int]:
    """Which messages are new: not stored visibly, and not a repeat of an earlier one's id."""
    out, seen = [], set()
    for i, m in enumerate(messages):
        if m.id is not None:
            if m.id in seen:
                continue
            seen.add(m.id)
            if m.id in stored and _visible(stored[m.id][1], now):
                continue
        out.append(i)
    return out


def sessions(
    store: FullStore, tenant: str, user_id: str, limit: int, *, cursor: str | None = None
) -> list[Session]:
    """A page of the user's sessions, the one with the latest message first."""
    with store.read():
        found = store.sessions(tenant, user_id, clock.now_ms(), limit, after=cursor)
    if found is None:
        raise BadRequest(
            "Invalid input: cursor: no session of this user has this id (its messages may have "
            "been deleted or have expired); list again from the start"
        )
    return found


def session(
    store: FullStore,
    tenant: str,
    user_id: str,
    session_id: str,
    limit: int,
    *,
    after: int | None = None,
) -> list[Memory]:
    """A page of one session's messages in position order, oldest first, after ``after``.

    :raises NotFound: the user has no such session (as for another user's or tenant's).
    """
    with store.read():
        found = store.session_messages(tenant, user_id, session_id, clock.now_ms(), limit, after)
    if found is None:
        raise NotFound("Session not found")
    return found


@dataclasses.dataclass(frozen=True)
class Context:
    """The messages around a message, in their session's order."""

    before: list[Memory]
    after: list[Memory]


def context_of(
    store: FullStore, tenant: str, found: t.Sequence[Memory], n: int
) -> dict[str, Context]:
    """Up to ``n`` visible messages on either side of each message of ``found``, by its id.

    Memories that are no messages get none. One read of the store.
    """
    anchors = [
        (m.user_id, m.session_id, m.position)
        for m in found
        if m.session_id is not None and m.position is not None
    ]
    if not n or not anchors:
        return {}
    now = clock.now_ms()
    out: dict[str, Context] = {}
    with store.read():
        by_user: dict[str, list[tuple[str, int]]] = {}
        for user_id, session_id, position in anchors:
            by_user.setdefault(user_id, []).append((session_id, position))
        around = {
            (user_id, *place): near
            for user_id, places in by_user.items()
            for place, near in store.neighbours(tenant, user_id, places, n, now).items()
        }
    for m in found:
        if m.session_id is not None and m.position is not None:
            near = around.get((m.user_id, m.session_id, m.position))
            if near is not None:
                out[m.id] = Context(*near)
    return out
