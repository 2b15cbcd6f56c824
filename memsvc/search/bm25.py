"""Keyword matches: BM25 over the calling user's own memories, and each match's strength.

A query becomes its terms (:mod:`memsvc.terms`: words, stemmed; never query
syntax): a memory holding any of them is a candidate. Candidates rank by
Okapi BM25 with statistics from the user's own memories only: how many of
them hold each term, and how long they are. So another user's or another
tenant's memories never change a ranking or a score.

Each match also has a *strength* in [0, 1]: the share of the query's
information the memory holds, each query term weighing its rarity among the
user's memories (its idf), a term no memory holds weighing as much as the
rarest, and a term with a digit (a code, a number, a date: what a question
most often hinges on) :data:`CODE_WEIGHT` times as much. A memory holding
every query term has strength 1; one holding only a word most memories
share, little. Hybrid search (:mod:`.hybrid`) raises a memory's cosine by
its match's strength, so a match on the rare name or code a question hinges
on lifts its memory above look-alikes, while a shared common word barely
moves a paraphrase's answer.
"""

from __future__ import annotations

import dataclasses
import typing as t

import numpy as np

#: BM25's term-frequency saturation and length normalisation (the usual values).
K1 = 1.2
B = 0.75

#: How much more a query term with a digit weighs in a match's strength.
#: Chosen with hybrid's BOOST and POWER (:mod:`.hybrid`): near misses on
#: codes and dates (INV-20418 among INV-20481, 24 June among 23 June) come
#: first as often as in keyword mode, paraphrases unchanged.
CODE_WEIGHT = 3.0


@dataclasses.dataclass(frozen=True)
class Matches:
    """A keyword search's matches, strongest first by BM25, ties to the newest."""

    seqs: np.ndarray  # int64
    bm25: np.ndarray  # float64, positive
    strength: np.ndarray  # float64, in [0, 1]

    def __len__(self) -> int:
        return len(self.seqs)


_NONE = Matches(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))


def rank(
    postings: t.Sequence[tuple[int, int, int, int]],
    asked: t.Mapping[int, bool],
    documents: int,
    total_terms: int,
) -> Matches:
    """Rank one user's memories holding any of a query's distinct terms.

    ``asked`` maps each of the query's terms to whether it is a code
    (:func:`memsvc.terms.codes`); ``postings`` are ``(term, seq, tf, dl)``
    rows of the user's index for those terms; ``documents`` and
    ``total_terms`` the user's memory count and their total length in terms.
    """
    if not postings or documents <= 0:
        return _NONE
    rows = np.array(postings, dtype=np.int64)
    present, term_of = np.unique(rows[:, 0], return_inverse=True)
    df = np.bincount(term_of).astype(np.float64)
    idf = np.log1p((documents - df + 0.5) / (df + 0.5))
    tf = rows[:, 2].astype(np.float64)
    length = rows[:, 3] / max(total_terms / documents, 1e-9)
    weight = idf[term_of] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length))
    seqs, owner = np.unique(rows[:, 1], return_inverse=True)
    scores = np.bincount(owner, weights=weight)

    # The query's information: its terms' idfs, one no memory holds as the
    # rarest, codes weighing more.
    def weight_of(term: int) -> float:
        return CODE_WEIGHT if asked.get(term, False) else 1.0

    weights = np.array([weight_of(term) for term in present.tolist()]) * idf
    rarest = np.log1p((documents - 0.5) / 1.5)
    missing = set(asked) - set(present.tolist())
    information = weights.sum() + rarest * sum(weight_of(term) for term in missing)
    held = np.bincount(owner, weights=weights[term_of]) / information
    order = np.lexsort((-seqs, -scores))
    return Matches(seqs[order], scores[order], np.clip(held[order], 0.0, 1.0))


@dataclasses.dataclass(frozen=True)
class Coverage:
    """Which of a query's terms each memory holds: the strength of several memories together.

    A message's words are often not all in one turn: "When is the dentist?"
    asked by one speaker, "Thursday at 7" answered by the next. The strength
    of a group (a message and its neighbours, a whole session) is the share
    of the query's information the group holds between them, as a single
    memory's strength is (:func:`rank`).
    """

    #: Each memory's held terms, as a bit set over the query's present terms.
    held: t.Mapping[int, int]
    #: Each present term's share of the query's information, by bit.
    weights: tuple[float, ...]

    def strength(self, seqs: t.Iterable[int]) -> float:
        """The strength of these memories taken together, in [0, 1]."""
        bits = 0
        for seq in seqs:
            bits |= self.held.get(seq, 0)
        if not bits:
            return 0.0
        return min(1.0, sum(w for i, w in enumerate(self.weights) if bits >> i & 1))


def coverage(
    postings: t.Sequence[tuple[int, int, int, int]],
    asked: t.Mapping[int, bool],
    documents: int,
) -> Coverage:
    """The :class:`Coverage` of a query's terms over the memories holding any (see :func:`rank`
    for the arguments and the weighing)."""
    if not postings or documents <= 0:
        return Coverage({}, ())
    rows = np.array(postings, dtype=np.int64)
    present, term_of = np.unique(rows[:, 0], return_inverse=True)
    df = np.bincount(term_of).astype(np.float64)
    idf = np.log1p((documents - df + 0.5) / (df + 0.5))

    def weight_of(term: int) -> float:
        return CODE_WEIGHT if asked.get(term, False) else 1.0

    weights = np.array([weight_of(term) for term in present.tolist()]) * idf
    rarest = np.log1p((documents - 0.5) / 1.5)
    missing = set(asked) - set(present.tolist())
    information = weights.sum() + rarest * sum(weight_of(term) for term in missing)
    held: dict[int, int] = {}
    for seq, bit in zip(rows[:, 1].tolist(), term_of.tolist(), strict=True):
        held[seq] = held.get(seq, 0) | (1 << bit)
    return Coverage(held, tuple((weights / information).tolist()))
