"""Extraction jobs: queued with the messages they read, looked at, retried, queued again.

A job is queued in the transaction that stores its messages
(:func:`queue`, from :func:`~.conversations.ingest`): a conversation is
stored exactly as it would be without extraction, and the job exists
exactly when the messages do. Workers run it later
(:mod:`.extraction`); nothing here calls a model.
"""

from __future__ import annotations

import typing as t
import uuid

from .. import clock
from ..errors import BadRequest
from ..errors import NotFound
from ..models import Job
from ..models import Memory
from ..store import FullStore
from ..store import Store


def queue(
    store: FullStore,
    tenant: str,
    user_id: str,
    session_id: str | None,
    messages: t.Sequence[Memory],
    now: int,
    *,
    replaces: bool = False,
) -> Job:
    """A job for these messages, queued (inside the write that stores them)."""
    job = Job(
        id=str(uuid.uuid4()),
        tenant=tenant,
        user_id=user_id,
        session_id=session_id,
        status="queued",
        attempts=0,
        created_at=now,
        updated_at=now,
        messages=tuple(m.id for m in messages),
        run_after=now,
        replaces=replaces,
    )
    store.insert_job(job)
    return job


def get(store: FullStore, tenant: str, job_id: str) -> Job:
    """One of the tenant's jobs; :class:`NotFound` as for another tenant's."""
    with store.read():
        job = store.get_job(tenant, job_id)
    if job is None:
        raise NotFound("Job not found")
    return job


def page(
    store: FullStore,
    tenant: str,
    limit: int,
    *,
    user_id: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> list[Job]:
    """A page of the tenant's jobs (of a user, of a status), newest first."""
    with store.read():
        found = store.list_jobs(tenant, limit, user_id=user_id, status=status, after=cursor)
    if found is None:
        raise BadRequest(
            "Invalid input: cursor: no job of this tenant has this id (its user may have been "
            "erased); list again from the start"
        )
    return found


def retry(store: FullStore, tenant: str, job_id: str) -> Job:
    """A failed job queued again, its attempts from zero; any other job answered as it is."""
    with store.write():
        job = store.retry_job(tenant, job_id, clock.now_ms())
    if job is None:
        raise NotFound("Job not found")
    return job


def lineage(
    store: FullStore,
    tenant: str,
    user_id: str,
    fact_id: str,
    sources: t.Sequence[str],
    superseded_by: str | None,
    most: int,
) -> tuple[list[Memory], Memory | None, list[Memory]]:
    """Where one of a user's facts came from and what it took the place of: at most ``most``
    of its source messages (in its order), the fact that replaced it, and at most ``most``
    facts it replaced; each read for this tenant's user only, the expired left out."""
    now = clock.now_ms()
    with store.read():
        found = store.user_memories(tenant, user_id, list(sources[:most]), now)
        by = None
        if superseded_by is not None:
            newer = store.user_memories(tenant, user_id, [superseded_by], now)
            by = newer[0][1] if newer else None
        replaced = store.facts_replaced_by(tenant, user_id, fact_id, most, now)
    return [m for _, m in found], by, replaced


def reextract(store: FullStore, tenant: str, user_id: str | None = None) -> list[Job]:
    """A job per session of the tenant's (or one user's) messages, replacing the facts drawn
    from them before (those are superseded by the new ones, their history kept)."""
    now = clock.now_ms()
    with store.write():
        jobs = []
        for user, session, ids in store.sessions_of_messages(tenant, user_id):
            job = Job(
                str(uuid.uuid4()), tenant, user, session, "queued", 0, now, now, tuple(ids),
                run_after=now, replaces=True,
            )  # fmt: skip
            store.insert_job(job)
            jobs.append(job)
    return jobs


def purge_ended(store: Store, days: int, now: int | None = None, batch: int = 500) -> int:
    """Delete the jobs that ended (done or failed) more than ``days`` days ago, and the
    token counts of days as old; how many jobs went. ``days`` 0 keeps them all."""
    if days <= 0:
        return 0
    full = t.cast(FullStore, store)
    before = (clock.now_ms() if now is None else now) - days * 86_400_000
    removed = 0
    while True:
        with full.write():
            gone = full.purge_jobs(before, batch)
        removed += gone
        if gone < batch:
            return removed


def counts(store: Store) -> dict[str, int]:
    """How many jobs there are of each status (the queue's depth for metrics)."""
    full = t.cast(FullStore, store)
    with full.read():
        return full.job_counts()
