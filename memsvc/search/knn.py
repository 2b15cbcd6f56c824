"""The uncached path: the store's KNN, widened until complete, then ranked exactly.

For a user the cache does not hold (too large for it, or no cache): the
store's KNN (sqlite-vec's, or pgvector's exact scan) returns windows most
similar first, so a memory's first window in the list is its best: memories
rank by first appearance. Memories the scope excludes are passed over, so a
selective filter widens the scan, up to reading the whole user. Candidates
are fetched until no memory past the last one fetched could still make the
cut (:func:`.exact.scan_complete`), then ranked exactly as a cached scan's.
"""

from __future__ import annotations

import numpy as np

from ..store import Entry
from ..store import UserState
from ..store import VectorSource
from . import building
from .exact import candidates
from .exact import rank
from .exact import scan_complete
from .request import SearchRequest
from .scanning import Ranked
from .scanning import of_entries
from .scanning import scan


def through_store(source: VectorSource, request: SearchRequest, state: UserState) -> list[Ranked]:
    """The request's best memories through the store's KNN (inside a read transaction)."""
    tenant, user_id, query = request.tenant, request.user_id, request.vector
    k, threshold, scope = request.k, request.threshold, request.scope
    fetch = min(k + 16, source.knn_max)
    while True:
        rows = source.knn(tenant, user_id, query, fetch)
        owners = source.owners(tenant, user_id, [row[0] for row in rows])
        first: dict[int, tuple[Entry, float]] = {}
        excluded: set[int] = set()
        for vid, distance, _ in rows:
            entry = owners.get(vid)
            if entry is None or entry.seq in first or entry.seq in excluded:
                continue
            if scope.admits(entry):
                first[entry.seq] = (entry, 1 - distance)
            else:
                excluded.add(entry.seq)
        found = list(first.values())
        if len(rows) < fetch:
            break
        kth = found[k - 1][1] if len(found) >= k else -np.inf
        if scan_complete(kth, 1 - rows[-1][1], threshold):
            break
        if fetch == source.knn_max:
            # Thousands of near-ties, or a selective scope: read everything.
            return scan(building.load(source, tenant, user_id, state), request)
        fetch = min(fetch * 4, source.knn_max)
    if not found:
        return []
    scores = np.array([score for _, score in found], dtype=np.float32)
    chosen = [found[i][0] for i in candidates(scores, k, threshold)]
    if not chosen:
        return []
    return rank(of_entries(source, request, chosen), query, k, threshold)
