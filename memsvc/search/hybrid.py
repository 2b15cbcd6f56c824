"""Hybrid search: semantic and keyword candidates together, ranked by named score parts.

The best semantic and keyword candidates of a deeper search (at least 30,
at most 100 of each) are pooled and their records read once. Each is
ranked by the sum of its named parts: its cosine, and a raise for its
keyword match's strength, :data:`BOOST` times the strength squared; so a
match on the rare name or code a question hinges on lifts its memory above
look-alikes, while a shared common word barely moves a paraphrase's answer.
Messages, dates and the query's time add the parts of :mod:`.conversation`
(neighbours, session, speaker, dates, time, recency, newer beats older). ``explain``
shows every part of each result (``parts``). A result's similarity is its
exact cosine and the threshold a floor on it, as in every mode.
"""

from __future__ import annotations

import dataclasses
import typing as t

import numpy as np

from ..models import Memory
from ..models import ScoredMemory
from ..observability import metrics
from ..store import Entry
from ..store import VectorSource
from . import conversation
from . import keyword
from . import semantic
from .cache import SearchCache
from .conversation import Candidate
from .hits import Hit
from .hits import answer
from .request import SearchRequest
from .scanning import cosines
from .scanning import unit_vectors
from .snapshot import Snapshot

#: An ordinary memory's keyword part: ``BOOST * strength ** POWER``. Chosen
#: with make eval's sets (near-miss names and codes, paraphrases) among
#: score fusions of several shapes and weights: it beats both halves on near
#: misses while losing at most 0.02 recall@1 on paraphrases against cosine
#: alone; reciprocal-rank fusion and fusions normalised by the best match of
#: each query lost 0.1-0.2 on paraphrases.
BOOST = conversation.WEIGHTS.keyword
POWER = 2.0

#: At most this many messages of the candidates' sessions are read for the
#: session parts; past it (sessions of thousands of messages) they are left out.
SESSION_MESSAGES = 5000


def search(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> list[ScoredMemory]:
    """The ``k`` best of the semantic and keyword candidates, by the sum of their parts."""
    deeper = request.deeper(min(100, max(2 * request.k, 30)))
    with source.read():  # every read sees one snapshot
        by_meaning, snap = semantic.hits(source, cache, deeper)
        metrics.searched("hybrid", snap is not None)
        found = keyword.matching(source, deeper)
        by_words = keyword.hits(source, deeper, snap, found)
        pool = {hit.seq: hit for hit in by_meaning}
        pool.update({hit.seq: hit for hit in by_words})  # the same cosine, and its strength
        meant = {hit.seq for hit in by_meaning}
        if request.interval is None and _plain(snap, pool):
            # Ordinary memories only, no time asked: cosine and keyword rank
            # them, and only the winners are read.
            ranked = sorted(pool.values(), key=_plain_order)[: request.k]
            return answer(source, ranked, lambda m, hit: _plain_result(m, hit, meant))
        records = source.memories_by_seq(list(pool))
        candidates = [
            Candidate(hit.seq, records[hit.seq], hit.cosine, hit.strength)
            for hit in pool.values()
            if hit.seq in records
        ]
        entries = _EntryReads(source, request)
        context = _context(source, request, candidates, found.coverage, snap, entries)
        for c in candidates:
            conversation.score(c, context)
        best = conversation.ranked(
            candidates,
            _vectors_of(source, request, snap, entries),
            now_question=context.now_question,
        )
    return [_result(c, pool[c.seq], meant) for c in best[: request.k]]


def _context(
    source: VectorSource,
    request: SearchRequest,
    candidates: list[Candidate],
    coverage: keyword.bm25.Coverage,
    snap: Snapshot | None,
    entries: _EntryReads,
) -> conversation.Context:
    """What the parts read beyond each candidate (inside the search's read transaction)."""
    messages = [c for c in candidates if c.memory.session_id is not None]
    sessions = None
    if messages:
        sessions = source.session_members(
            request.tenant,
            request.user_id,
            sorted({c.memory.session_id for c in messages if c.memory.session_id}),
            request.scope.now,
            SESSION_MESSAGES,
        )
    speakers = conversation.named(
        request.text, {c.memory.speaker for c in messages if c.memory.speaker}
    )
    if speakers and request.embed is not None:
        _cosines_without_names(source, request, messages, speakers, snap, entries)
    return conversation.Context(
        coverage,
        sessions or {},
        frozenset(speakers),
        conversation.asks_when(request.text),
        request.interval,
        conversation.asks_now(request.text),
    )


def _cosines_without_names(
    source: VectorSource,
    request: SearchRequest,
    messages: list[Candidate],
    speakers: set[str],
    snap: Snapshot | None,
    entries: _EntryReads,
) -> None:
    """Each message's cosine with the query without the speakers' names."""
    text = conversation.without_names(request.text, speakers)
    if text == request.text or request.embed is None:
        return
    plain = dataclasses.replace(request, vector=request.embed(text))
    sims = cosines(source, plain, list(entries([c.seq for c in messages]).values()), snap)
    for c in messages:
        if c.seq in sims:
            c.cosine_without_names = sims[c.seq]


class _EntryReads:
    """The candidates' entries, each read at most once in a search (the cosine without names
    and newer-beats-older both need them)."""

    def __init__(self, source: VectorSource, request: SearchRequest):
        self.source, self.request = source, request
        self.known: dict[int, Entry] = {}

    def __call__(self, seqs: list[int]) -> dict[int, Entry]:
        missing = [seq for seq in seqs if seq not in self.known]
        if missing:
            tenant, user_id = self.request.tenant, self.request.user_id
            self.known.update(self.source.entries_by_seq(tenant, user_id, missing))
        return {seq: self.known[seq] for seq in seqs if seq in self.known}


def _vectors_of(
    source: VectorSource, request: SearchRequest, snap: Snapshot | None, entries: _EntryReads
) -> t.Callable[[list[int]], np.ndarray]:
    """The candidates' unit vectors, read when newer-beats-older compares them."""

    def vectors(seqs: list[int]) -> np.ndarray:
        found = entries(seqs)
        return unit_vectors(source, request, [found[seq] for seq in seqs], snap)

    return vectors


def _plain(snap: Snapshot | None, pool: dict[int, Hit]) -> bool:
    """Whether the user's snapshot says every candidate is an ordinary memory."""
    if snap is None or not pool:
        return snap is not None
    at = snap.positions(np.fromiter(sorted(pool), dtype=np.int64, count=len(pool)))
    return at is not None and not snap.marks[at].any()


def _plain_parts(hit: Hit) -> dict[str, float]:
    parts = {"cosine": hit.cosine}
    if hit.strength is not None:
        parts["keyword"] = BOOST * hit.strength**POWER
    return parts


def _plain_order(hit: Hit) -> tuple[float, int, int]:
    return (-sum(_plain_parts(hit).values()), -hit.created, -hit.seq)


def _plain_result(memory: Memory, hit: Hit, meant: set[int]) -> ScoredMemory:
    parts = _plain_parts(hit)
    matched = _matched(hit, meant)
    return ScoredMemory(memory, hit.cosine, matched, hit.strength, sum(parts.values()), parts)


def _matched(hit: Hit, meant: set[int]) -> tuple[str, ...]:
    return tuple(
        name
        for name, found in (("keyword", hit.strength is not None), ("semantic", hit.seq in meant))
        if found
    )


def _result(c: Candidate, hit: Hit, meant: set[int]) -> ScoredMemory:
    return ScoredMemory(c.memory, hit.cosine, _matched(hit, meant), hit.strength, c.score,
                        dict(c.parts))  # fmt: skip
