"""Exact cosine ranking: the arithmetic both search paths share.

Fast scans (sqlite-vec's KNN, a float32 matrix product) score in float32,
which can misorder two memories whose similarities differ by less than the
rounding error. So a scan only nominates candidates: every memory whose
float32 score is within :data:`ERROR` of the k-th best (or of the
threshold) is rescored in float64, and the final order comes from that.
The result is what exact arithmetic over the stored vectors gives, ties
broken newest first.
"""

from __future__ import annotations

import typing as t

import numpy as np

from ..observability import metrics

#: Bound on a float32 cosine score's error. A float32 dot product of d
#: terms errs by at most d·2^-24 times the sum of |terms|, which for unit
#: vectors is <= 1: 9.2e-5 at d = 1536. Normalising adds a few ulps. 5e-4
#: leaves a wide safety factor and costs only a few extra candidates.
ERROR = 5e-4


_BLOCK = 4096  # rows converted to float64 at a time


# np.sum is np.add.reduce behind a layer of Python checks: the same sums, a
# microsecond less per call, and a search makes several on a few rows.
_sum = np.add.reduce


def _row_similarity(vectors: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float64 cosine of each row with ``query`` (unclamped), and which rows are all zero."""
    q = np.asarray(query, dtype=np.float64)
    q_norm = np.sqrt(_sum(q * q))
    if len(vectors) <= _BLOCK:
        # The usual case, a search's few candidates: the same arithmetic in
        # one block, without the copies the loop below makes.
        return _block_similarity(np.asarray(vectors, dtype=np.float64), q, q_norm)
    out = np.empty(len(vectors), dtype=np.float64)
    zero = np.empty(len(vectors), dtype=bool)
    for start in range(0, len(vectors), _BLOCK):
        v = np.asarray(vectors[start : start + _BLOCK], dtype=np.float64)
        out[start : start + len(v)], zero[start : start + len(v)] = _block_similarity(v, q, q_norm)
    return out, zero


def _block_similarity(
    v: np.ndarray, q: np.ndarray, q_norm: np.floating
) -> tuple[np.ndarray, np.ndarray]:
    dots = _sum(v * q, axis=1)
    norms = np.sqrt(_sum(v * v, axis=1)) * q_norm
    zero = norms == 0
    if zero.any():
        norms[zero] = 1.0  # dots are 0 there too: the similarity is 0
    return dots / norms, zero


def _clamp(values: np.ndarray) -> np.ndarray:
    """``values`` clipped into [0, 1], as np.clip does (NaN stays NaN), in a new array."""
    out = np.maximum(values, 0.0)
    return np.minimum(out, 1.0, out=out)


def exact_similarity(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row with ``query`` in float64, clamped into [0, 1].

    Row by row, with numpy's own summation rather than BLAS: a BLAS
    product may round a row differently depending on where it sits, and
    identical memories must score identically so that ties go by age. A
    zero vector (never stored by memsvc's embedders) is similar to nothing.
    """
    return _clamp(_row_similarity(vectors, query)[0])


def similarities(
    vectors: np.ndarray, owner: np.ndarray, count: int, query: np.ndarray
) -> np.ndarray:
    """Each of ``count`` memories' exact similarity: its best row's, clamped into [0, 1].

    A memory with an all-zero row (being deleted, see :func:`rank`) scores -1.
    """
    rows, zero = _row_similarity(vectors, query)
    if len(rows) == count:
        # One row per memory (owner is 0, 1, 2, ...): no grouping needed;
        # ufunc.at is slow on the few rows a search ranks.
        sims, gone = rows, zero
    else:
        sims = np.full(count, -np.inf)
        np.maximum.at(sims, owner, rows)
        gone = np.zeros(count, dtype=bool)
        np.logical_or.at(gone, owner, zero)
    out = _clamp(sims)
    if gone.any():
        out[gone] = -1.0
    return out


class Candidates(t.NamedTuple):
    """Memories to rank: their rows' vectors, and for each row its memory (a position in
    ``seqs`` and ``created``); a memory's similarity is its best row's."""

    vectors: np.ndarray
    owner: np.ndarray
    seqs: np.ndarray
    created: np.ndarray


def rank(
    candidates: Candidates, query: np.ndarray, k: int, threshold: float
) -> list[tuple[int, float, int]]:
    """The ``k`` best of these candidate memories by exact similarity >= ``threshold``.

    A memory with an all-zero row is left out: the search cache zeroes the
    rows of a memory deleted while this search was under way. Returns
    ``(seq, similarity, created)``, most similar first, ties to the newest
    (``created`` descending, then ``seq`` descending).
    """
    vectors, owner, seqs, created = candidates
    metrics.ranked(len(seqs))
    if len(seqs) == 0:
        return []
    sims = similarities(vectors, owner, len(seqs), query)
    keep = np.flatnonzero(sims >= threshold)
    if len(keep) == 0:
        return []
    order = np.lexsort((-seqs[keep], -created[keep], -sims[keep]))[:k]
    chosen = keep[order]
    return list(
        zip(seqs[chosen].tolist(), sims[chosen].tolist(), created[chosen].tolist(), strict=True)
    )


def candidates(scores: np.ndarray, k: int, threshold: float) -> np.ndarray:
    """Indices whose float32 cosine ``scores`` could put them in the exact top ``k``.

    ``scores`` holds ``-inf`` for rows to ignore.
    """
    n = len(scores)
    cut = threshold
    if n > k:
        kth = float(np.partition(scores, n - k)[n - k])
        cut = max(cut, kth - ERROR)
    if cut <= 0:
        return np.flatnonzero(scores > -np.inf)
    return np.flatnonzero(scores + ERROR >= cut)


def scan_complete(kth: float, last: float, threshold: float) -> bool:
    """Whether a scan that stopped at cosine ``last`` has every candidate.

    ``kth`` is the k-th best cosine seen. Memories not yet seen score at
    most ``last``; they cannot make the cut if even with the error they
    fall below the k-th best (when that is above 0) or below the threshold.
    """
    kth_floor = kth - ERROR
    if kth_floor > 0 and last + ERROR < kth_floor:
        return True
    return threshold > 0 and last + ERROR < threshold
