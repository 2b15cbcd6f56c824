"""Hybrid search: semantic and keyword candidates together, ranked by their fused score.

The best semantic and keyword candidates of a deeper search (at least 30,
at most 100) are pooled; each is ranked by the sum of its named score
parts (:data:`PARTS`): its cosine, and a raise for its keyword match's
strength, :data:`BOOST` times the strength squared. So a match on the rare
name or code a question hinges on lifts its memory above look-alikes,
while a shared common word barely moves a paraphrase's answer. A new
signal is one more named part; ``explain`` can show each (``parts`` on a
result). A result's similarity is its exact cosine and the threshold a
floor on it, as in every mode.
"""

from __future__ import annotations

import typing as t

from ..models import Memory
from ..models import ScoredMemory
from ..observability import metrics
from ..store import VectorSource
from . import keyword
from . import semantic
from .cache import SearchCache
from .hits import Hit
from .hits import answer
from .request import SearchRequest

#: The keyword part: ``BOOST * strength ** POWER``. Chosen with make eval's
#: sets (conversation turns, near-miss names and codes, paraphrases) among
#: score fusions of several shapes and weights: it beats both halves on
#: conversation turns and near misses while losing at most 0.02 recall@1 on
#: paraphrases against cosine alone; reciprocal-rank fusion and fusions
#: normalised by the best match of each query lost 0.1-0.2 on paraphrases.
BOOST = 0.5
POWER = 2.0

#: The named parts a hybrid score adds up, in order, each from a hit.
PARTS: dict[str, t.Callable[[Hit], float]] = {
    "cosine": lambda hit: hit.cosine,
    "keyword": lambda hit: 0.0 if hit.strength is None else BOOST * hit.strength**POWER,
}


def parts(hit: Hit) -> dict[str, float]:
    """A hit's score parts, by name (:data:`PARTS`)."""
    return {name: part(hit) for name, part in PARTS.items()}


def fused(hit: Hit) -> float:
    """What hybrid search ranks by: the sum of the hit's score parts."""
    return sum(parts(hit).values())


def search(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> list[ScoredMemory]:
    """The ``k`` best of the semantic and keyword candidates, by :func:`fused` score."""
    deeper = request.deeper(min(100, max(2 * request.k, 30)))
    with source.read():  # both halves see one snapshot
        by_meaning, snap = semantic.hits(source, cache, deeper)
        metrics.searched("hybrid", snap is not None)
        by_words = keyword.hits(source, deeper, snap)
        by_seq = {hit.seq: hit for hit in by_meaning}
        by_seq.update({hit.seq: hit for hit in by_words})  # the same cosine, and its strength
        meant = {hit.seq for hit in by_meaning}
        ranked = sorted(by_seq.values(), key=lambda hit: (-fused(hit), -hit.created, -hit.seq))

        def scored(memory: Memory, hit: Hit) -> ScoredMemory:
            matched = tuple(
                name
                for name, found in (
                    ("keyword", hit.strength is not None),
                    ("semantic", hit.seq in meant),
                )
                if found
            )
            named = parts(hit)
            return ScoredMemory(
                memory, hit.cosine, matched, hit.strength, sum(named.values()), named
            )

        return answer(source, ranked[: request.k], scored)
