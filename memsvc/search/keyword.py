"""Keyword search: the user's memories holding the query's words, strongest match first.

The user's own keyword index gives the matches, ranked by BM25
(:mod:`.bm25`); they are taken best first, a growing chunk at a time, until
``k`` of them pass the scope and the cosine threshold. Each result's
similarity is its exact cosine (from the user's snapshot when it holds the
memory, else from the store) and the threshold a floor on it; it is ranked
by its BM25 score.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import terms
from ..models import Memory
from ..models import ScoredMemory
from ..observability import metrics
from ..store import VectorSource
from . import bm25
from .cache import SearchCache
from .hits import Hit
from .hits import answer
from .request import SearchRequest
from .scanning import cosines
from .snapshot import Snapshot


def search(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> list[ScoredMemory]:
    """The ``k`` memories matching any of the query's words best, cosine >= ``threshold``."""
    with source.read():
        snapshot = current(source, cache, request)
        metrics.searched("keyword", snapshot is not None)
        return answer(source, hits(source, request, snapshot), by_bm25)


def by_bm25(memory: Memory, hit: Hit) -> ScoredMemory:
    """A keyword result: matched by keyword, ranked by its BM25 score."""
    return ScoredMemory(memory, hit.cosine, ("keyword",), hit.strength, hit.bm25)


@dataclasses.dataclass(frozen=True)
class Found:
    """A query's keyword matches among a user's memories, and which terms each holds."""

    matches: bm25.Matches
    coverage: bm25.Coverage


_NOTHING = Found(bm25.Matches(*(np.zeros(0),) * 3), bm25.Coverage({}, ()))


def matching(source: VectorSource, request: SearchRequest) -> Found:
    """Every memory of the user holding any of the query's terms (inside a read transaction)."""
    wanted = terms.codes(request.text)
    state = source.user_state(request.tenant, request.user_id) if wanted else None
    if state is None:
        return _NOTHING
    postings = source.postings(state.user_key, list(wanted))
    return Found(
        bm25.rank(postings, wanted, state.count, state.terms),
        bm25.coverage(postings, wanted, state.count),
    )


def hits(
    source: VectorSource,
    request: SearchRequest,
    snapshot: Snapshot | None = None,
    found: Found | None = None,
) -> list[Hit]:
    """The ``k`` best keyword matches the scope admits whose cosine is >= ``threshold``.

    Best first (BM25). Cosines come from the user's cached ``snapshot`` when
    there is one (current in this transaction), else from the store. Call
    inside a read transaction; ``found``: the query's :func:`matching`, if
    read already.
    """
    tenant, user_id, k = request.tenant, request.user_id, request.k
    matches = (found if found is not None else matching(source, request)).matches
    seqs = matches.seqs.tolist()
    scores = zip(matches.bm25.tolist(), matches.strength.tolist(), strict=True)
    by_seq = dict(zip(seqs, scores, strict=True))
    best: list[Hit] = []
    start, chunk = 0, max(4 * k, 40)
    # Best first, a growing chunk at a time, until k qualify.
    while start < len(seqs) and len(best) < k:
        part = seqs[start : start + chunk]
        entries = source.entries_by_seq(tenant, user_id, part)
        admitted = [
            entries[seq] for seq in part if seq in entries and request.scope.admits(entries[seq])
        ]
        cosine = cosines(source, request, admitted, snapshot)
        best += [
            Hit(e.seq, cosine[e.seq], e.created_at, *by_seq[e.seq])
            for e in admitted
            if cosine[e.seq] >= request.threshold
        ]
        start += chunk
        chunk *= 4
    return best[:k]


def current(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> Snapshot | None:
    """The user's cached snapshot, current in this read transaction; None without one."""
    if cache is None:
        return None
    state = source.user_state(request.tenant, request.user_id)
    if state is None:
        return None
    return cache.current(source, request.tenant, request.user_id, state)
