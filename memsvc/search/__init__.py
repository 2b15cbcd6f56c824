"""Exact search of one user's memories: the whole algorithm, in one place.

:func:`nearest` runs one search inside one read transaction:

1. read the user's change counters (one indexed row);
2. take the user's vectors from this worker's cache (:mod:`.cache`),
   brought up to date with those counters, and scan them with one matrix
   product; or, for a user the cache does not hold, gather candidates with
   sqlite-vec's KNN, fetching more until no memory past the last one fetched
   could still make the cut;
3. rank the candidates exactly (:mod:`.exact`): float64 cosine, threshold,
   ties to the newest;
4. load the winning memories' rows, once.

The cached and uncached paths nominate candidates differently and rank them
with the same arithmetic, so they return the same answer.
"""

from __future__ import annotations

import numpy as np

from ..models import ScoredMemory
from ..store import Store
from ..store import vec0
from .cache import SearchCache
from .exact import candidates
from .exact import rank
from .exact import scan_complete

__all__ = ["SearchCache", "nearest"]


def nearest(
    store: Store,
    cache: SearchCache | None,
    tenant: str,
    user_id: str,
    query: np.ndarray,
    k: int,
    threshold: float,
) -> list[ScoredMemory]:
    """A user's ``k`` memories most similar to ``query`` with similarity >= ``threshold``.

    Most similar first, ties to the newest; exact whichever path is taken.
    """
    with store.read():
        state = store.user_state(tenant, user_id)
        if state is None or state.count == 0:
            return []
        snapshot = cache.current(store, tenant, user_id, state) if cache is not None else None
        if snapshot is not None:
            scores = snapshot.scores(query)
            idx = candidates(scores, k, threshold)
            best = rank(
                snapshot.matrix[idx], snapshot.seqs[idx], snapshot.created[idx], query, k, threshold
            )
        else:
            best = _knn_ranked(store, tenant, user_id, query, k, threshold)
        found = store.memories_by_seq([seq for seq, _ in best])
    return [ScoredMemory(found[seq], similarity) for seq, similarity in best if seq in found]


def _knn_ranked(
    store: Store, tenant: str, user_id: str, query: np.ndarray, k: int, threshold: float
) -> list[tuple[int, float]]:
    """The uncached path: sqlite-vec KNN candidates, widened until complete, ranked exactly."""
    fetch = min(k + 16, vec0.KNN_MAX)
    while True:
        rows = store.knn(tenant, user_id, query, fetch)
        if len(rows) < fetch:
            break
        if scan_complete(1 - rows[k - 1][1], 1 - rows[-1][1], threshold):
            break
        if fetch == vec0.KNN_MAX:
            # Thousands of near-ties: more than a KNN query returns.
            seqs, created, vectors = store.user_vectors(tenant, user_id)
            return rank(vectors, seqs, created, query, k, threshold)
        fetch = min(fetch * 4, vec0.KNN_MAX)
    if not rows:
        return []
    seqs = np.array([row[0] for row in rows], dtype=np.int64)
    vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
    return rank(vectors.reshape(len(rows), -1), seqs, store.created_of(seqs), query, k, threshold)
