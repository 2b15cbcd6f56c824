"""Running one claimed extraction job: the prompt, the model's call, its facts applied once.

A worker (:mod:`memsvc.extracting`) claims a job under a lease and hands
it here. The job's messages and the user's current facts most related to
them are read; the model is called with no transaction open; its answer,
untrusted, is read by :mod:`memsvc.extraction.answer` (labels the prompt
did not give map to nothing, so no other user's memory can be named);
the new facts are embedded; and then, in one write transaction that first
checks the lease is still this worker's, the facts are inserted, the
facts they replace superseded (a history version each), and the job
settled with its tokens. A call that fails, times out or answers nonsense
puts the job back in the queue with a backoff, or fails it after the last
attempt, applying nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import typing as t
import uuid

from .. import clock
from ..embeddings import Embedder
from ..embeddings.windows import document_vectors
from ..embeddings.windows import query_vector
from ..extraction import answer
from ..extraction import prompt
from ..extraction.llm import ModelError
from ..extraction.llm import Reply
from ..extraction.llm import Usage
from ..models import Job
from ..models import Memory
from ..models import Moment
from ..models import Selection
from ..observability import audit
from ..observability import metrics
from ..search import Scope
from ..search import SearchRequest
from ..search import search
from ..store import FullStore
from . import timing

log = logging.getLogger(__name__)


class Model(t.Protocol):
    """What a job needs of the language model (:class:`memsvc.extraction.llm.ChatModel`)."""

    def complete(
        self, messages: list[dict[str, str]], schema: dict[str, t.Any], *, name: str = ...
    ) -> Reply: ...


@dataclasses.dataclass(frozen=True)
class Policy:
    """How jobs run: the operator's settings."""

    #: Model calls a job may make.
    max_attempts: int = 5
    #: A fact's text is checked as ``content`` is: at most this long.
    max_chars: int = 65_536
    #: The first retry waits about this long, each next one twice as long (at most 10 minutes).
    backoff_seconds: float = 2.0
    #: Most of the user's current facts shown to the model.
    related_facts: int = 30


def run(
    store: FullStore,
    embedder: Embedder,
    model: Model,
    policy: Policy,
    job: Job,
    owner: str,
) -> str:
    """Run a job claimed under ``owner``'s lease; what became of it: done, queued, failed, lost.

    "lost": the lease went to another worker meanwhile; nothing was changed.
    """
    now = clock.now_ms()
    with store.read():
        messages = [m for _, m in store.user_memories(job.tenant, job.user_id, job.messages, now)]
        facts = [m for _, m in store.current_facts(job.tenant, job.user_id, now)]
    if not messages:  # every message deleted meanwhile: nothing to draw from
        return _apply(store, embedder, job, owner, [], Usage(0, 0, False))
    related = _related(store, embedder, job, messages, facts, policy.related_facts, now)
    chat, labels = prompt.chat(messages, related, Moment(now))
    try:
        reply = model.complete(chat, prompt.SCHEMA)
    except ModelError as e:
        metrics.model_call(job.tenant, "error", *_tokens(e.usage))
        return _missed(store, job, owner, policy, e.reason, e.retryable, e.retry_after, e.usage)
    try:
        proposed, notes = answer.read(reply.content, labels, max_chars=policy.max_chars)
    except answer.InvalidAnswer as e:
        metrics.model_call(job.tenant, "invalid", *_tokens(reply.usage))
        reason = f"the model's answer was unusable: {e}"
        return _missed(store, job, owner, policy, reason, True, None, reply.usage)
    metrics.model_call(job.tenant, "ok", *_tokens(reply.usage))
    if notes:
        log.info("job %s: %s", job.id, "; ".join(notes))
    return _apply(store, embedder, job, owner, proposed, reply.usage)


def _tokens(usage: Usage | None) -> tuple[int, int]:
    return (0, 0) if usage is None else (usage.prompt_tokens, usage.completion_tokens)


def _related(
    store: FullStore,
    embedder: Embedder,
    job: Job,
    messages: list[Memory],
    facts: list[Memory],
    k: int,
    now: int,
) -> list[Memory]:
    """The user's current facts most related to the job's messages: all, when few enough."""
    if len(facts) <= k:
        return facts
    text = "\n".join(m.content for m in messages)[:4000]
    request = SearchRequest(
        job.tenant,
        job.user_id,
        query_vector(embedder, text),
        text,
        k,
        -1.0,
        Scope(now, selection=Selection(kinds=frozenset({"fact"}))),
        "hybrid",
    )
    return [found.memory for found in search(store, None, request)]


def _missed(
    store: FullStore,
    job: Job,
    owner: str,
    policy: Policy,
    reason: str,
    retryable: bool,
    retry_after: float | None,
    usage: Usage | None,
) -> str:
    """A call that gave nothing usable: the job queued again after a backoff, or failed."""
    now = clock.now_ms()
    tokens = _tokens(usage)
    with store.write():
        if store.job_held(job.id, owner) is None:
            return "lost"
        if retryable and job.attempts < policy.max_attempts:
            wait = _backoff(policy.backoff_seconds, job.attempts, retry_after)
            store.settle_job(
                job.id,
                now,
                status="queued",
                error=f"attempt {job.attempts} of {policy.max_attempts}: {reason}; "
                f"trying again in {wait:.0f} s",
                run_after=now + int(wait * 1000),
                tokens=tokens,
            )
            return "queued"
        why = reason if not retryable else f"{reason} (after {job.attempts} attempts)"
        store.settle_job(job.id, now, status="failed", error=why, tokens=tokens)
    metrics.job_ended("failed", (now - job.created_at) / 1000)
    _audited(job, "failed", tokens)
    log.warning("job %s failed: %s", job.id, why)
    return "failed"


def _backoff(base: float, attempts: int, retry_after: float | None) -> float:
    """Seconds before the next attempt: doubling from ``base``, jittered, at least Retry-After."""
    wait = min(600.0, base * 2 ** max(0, attempts - 1)) * random.uniform(0.5, 1.0)
    return max(wait, retry_after or 0.0)


def _apply(
    store: FullStore,
    embedder: Embedder,
    job: Job,
    owner: str,
    proposed: list[answer.Proposed],
    usage: Usage,
) -> str:
    """The job's facts and supersessions, and its status, in one transaction, if still held."""
    vectors = document_vectors(embedder, [p.text for p in proposed]) if proposed else []
    with store.write():
        if store.job_held(job.id, owner) is None:
            return "lost"
        now = clock.now_ms()
        current = {m.id: (seq, m) for seq, m in store.current_facts(job.tenant, job.user_id, now)}
        sources = {
            m.id: m for _, m in store.user_memories(job.tenant, job.user_id, job.messages, now)
        }
        added: list[Memory] = []
        kept_vectors = []
        replaced: dict[str, Memory] = {}  # superseded fact id -> the fact that replaces it
        unchanged = 0
        for fact, vector in zip(proposed, vectors, strict=True):
            if any(answer.same_text(fact.text, m.content) for _, m in current.values()) or any(
                answer.same_text(fact.text, m.content) for m in added
            ):
                unchanged += 1
                continue
            made = _fact(job, fact, sources, now)
            if made is None:
                continue
            added.append(made)
            kept_vectors.append(vector)
            for old in fact.supersedes:
                if old in current and old not in replaced:
                    replaced[old] = made
        if job.replaces and added:
            # A re-extraction: what was drawn from these messages before gives way.
            drawn = set(job.messages)
            for fact_id, (_, old_fact) in current.items():
                if fact_id not in replaced and drawn & set(old_fact.sources or ()):
                    replaced[fact_id] = next(
                        (a for a in added if set(a.sources or ()) & set(old_fact.sources or ())),
                        added[0],
                    )
        if added:
            store.insert_memories(added, kept_vectors)
        for fact_id, by in replaced.items():
            seq, old_fact = current[fact_id]
            updated = dataclasses.replace(
                old_fact,
                superseded_by=by.id,
                valid_to=max(by.time, old_fact.time),
                version=old_fact.version + 1,
                updated_at=now,
            )
            store.update_memory(seq, old_fact, updated, None)
            store.record_event(seq, updated.version, "supersede")
        result = {
            "added": [m.id for m in added],
            "superseded": list(replaced),
            "unchanged": unchanged,
        }
        store.settle_job(job.id, now, status="done", facts=result, tokens=_tokens(usage))
    metrics.job_ended("done", (now - job.created_at) / 1000)
    _audited(job, "done", _tokens(usage), added=len(added), superseded=len(replaced))
    return "done"


def _audited(job: Job, status: str, tokens: tuple[int, int], **details: t.Any) -> None:
    """A job's end in the audit trail, with the tokens all its calls took."""
    audit.record(
        f"job.{status}",
        "extraction",
        job.tenant,
        job_id=job.id,
        attempts=job.attempts,
        prompt_tokens=job.prompt_tokens + tokens[0],
        completion_tokens=job.completion_tokens + tokens[1],
        **details,
    )


def _fact(
    job: Job, proposed: answer.Proposed, sources: dict[str, Memory], now: int
) -> Memory | None:
    """The memory a proposed fact becomes; None if none of its sources is left."""
    kept = [sources[s] for s in proposed.sources if s in sources]
    if not kept:
        return None
    latest = max(kept, key=lambda m: m.time)
    moment = proposed.occurred_at or Moment(latest.time, latest.offset)
    return Memory(
        id=str(uuid.uuid4()),
        tenant=job.tenant,
        user_id=job.user_id,
        content=proposed.text,
        metadata={},
        created_at=now,
        updated_at=now,
        kind="fact",
        occurred_at=moment.ms,
        offset=moment.offset,
        sources=tuple(m.id for m in kept),
        dates=timing.dates_of(proposed.text, moment),
    )
