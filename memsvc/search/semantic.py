"""Semantic search: a user's memories most similar to the query, exactly.

One search inside one read transaction (for a user whose cached vectors
are current, one read without a transaction: :func:`warm`):

1. read the user's change counters (one indexed row);
2. take the user's vectors from the cache (:mod:`.cache`: this worker's
   memory, or for a large user a snapshot file every worker of the box
   maps), brought up to date with those counters, score every window with
   one matrix product and keep each memory's best (:mod:`.scanning`); or,
   for a user the cache does not hold, gather candidates with the store's
   KNN (:mod:`.knn`);
3. leave out what the :class:`~.request.Scope` excludes (expired memories,
   metadata filters, creation times) *before* ranking, so the answer holds
   the ``k`` best memories among those that qualify;
4. rank the candidates exactly (:mod:`.exact`): float64 cosine of every
   window, a memory scoring as its best window, threshold, ties to the
   newest;
5. load the winning memories' rows, once; or, for a snapshot that is
   current, take those it kept from earlier searches (the user's counters
   unchanged, none of their memories changed) and read only the others.

The cached and uncached paths nominate candidates differently and rank them
with the same arithmetic and the same filter semantics, so they return the
same answer.
"""

from __future__ import annotations

import numpy as np

from ..models import ScoredMemory
from ..observability import metrics
from ..store import VectorSource
from .cache import SearchCache
from .hits import Hit
from .hits import Keep
from .hits import answer
from .hits import by_cosine
from .knn import through_store
from .request import SearchRequest
from .scanning import nominate
from .scanning import rank_in
from .scanning import scan
from .snapshot import Snapshot

#: Floats (rows x dimensions) up to which a cached user is searched before
#: checking that the cache is current: 4 MB, a scan about as long as one
#: round trip to PostgreSQL. Past that, a scan wasted on an out-of-date
#: snapshot would cost more than the round trips saved.
SCAN_FIRST_FLOATS = 1 << 20

#: Candidates beyond ``k`` up to which a store that reads ahead is asked for
#: all the scan's candidates it lacks while they are ranked
#: (:meth:`~memsvc.store.VectorSource.memories_ahead`): a few more rows read,
#: for a round trip under way meanwhile. Past that (a threshold of 0 can make
#: every memory a candidate), it reads the winners it lacks once they are
#: known. A winner not asked for ahead (rare: a float32 near-tie) is read
#: after, again.
AHEAD_CANDIDATES = 16


def search(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> list[ScoredMemory]:
    """The ``k`` memories most similar to the query, similarity >= ``threshold``, exactly.

    Only memories the scope admits; most similar first, ties to the
    newest; exact whichever path is taken.
    """
    found = warm(source, cache, request)
    if found is not None:
        metrics.searched("semantic", True)
        return found
    with source.read():
        found_hits, snap = hits(source, cache, request)
        metrics.searched("semantic", snap is not None)
        keep = Keep(cache, request.tenant, request.user_id, snap)
        return answer(source, found_hits, by_cosine, keep)


def hits(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> tuple[list[Hit], Snapshot | None]:
    """The request's hits, and the snapshot they came from (None: through the store).

    Call inside a read transaction.
    """
    tenant, user_id = request.tenant, request.user_id
    state = source.user_state(tenant, user_id)
    if state is None or state.count == 0:
        if cache is not None:
            cache.forget(tenant, user_id)
        return [], None
    snapshot = cache.current(source, tenant, user_id, state) if cache is not None else None
    if snapshot is not None:
        best = scan(snapshot, request)
        if request.scope.filter and cache is not None:
            cache.settle(tenant, user_id, snapshot)  # it may have built filter columns
    else:
        best = through_store(source, request, state)
    return [Hit(seq, cosine, created) for seq, cosine, created in best], snapshot


def warm(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> list[ScoredMemory] | None:
    """:func:`search` from the user's cached snapshot, if it is current; else None.

    The snapshot is scanned first, then the user's counters and the winning
    memories are read at one instant (:meth:`~memsvc.store.VectorSource.memories_if_current`):
    the counters unchanged, the answer is the one a read transaction would
    give, for one read of the store instead of two in a transaction (one
    round trip to PostgreSQL instead of four). Winners an earlier search
    answered as of the same counters are the snapshot's
    :class:`~.records.Records`: when it holds them all, the counters alone
    are read. Changed (a write came in between), the caller searches the
    usual way, which brings the snapshot up to date. Only for users small
    enough (:data:`SCAN_FIRST_FLOATS`). A store that reads ahead
    (PostgreSQL) is asked for the counters and the candidates it lacks as
    soon as the scan has them, and answers once they are ranked.
    """
    tenant, user_id, k = request.tenant, request.user_id, request.k
    snap = cache.peek(tenant, user_id) if cache is not None else None
    if (
        snap is None
        or cache is None
        or snap.n * snap.matrix.shape[1] > SCAN_FIRST_FLOATS
        # Vectors of another size: of the embedder before a re-embedding.
        or snap.matrix.shape[1] != len(request.vector)
    ):
        return None
    idx, scores = nominate(snap, request)
    records = snap.records
    known = records.found
    ahead: list[int] | None = None
    if source.reads_ahead:
        # The store may read while the candidates are ranked (PostgreSQL: the
        # statement is under way meanwhile): the counters alone if the likely
        # winners (the best float32 scores, over the threshold) were answered
        # before, else the candidates it lacks, if few.
        seqs = snap.seqs[idx]
        best_first = np.argsort(-scores, kind="stable")[:k]
        likely = seqs[best_first[scores[best_first] >= request.threshold]].tolist()
        if all(seq in known for seq in likely):
            ahead = []
        else:
            unknown = [seq for seq in seqs.tolist() if seq not in known]
            ahead = unknown if len(unknown) <= k + AHEAD_CANDIDATES else None
    with source.memories_ahead(tenant, user_id, snap.state, ahead) as read:
        best = rank_in(snap, idx, request)
        # The winners it lacks; with none, the counters alone are read (the
        # user's memories are those answered before while they are unchanged).
        found = read([seq for seq, _, _ in best if seq not in known])
    if found is None:
        return None
    grown = bool(request.scope.filter)  # it may have built filter columns
    if found:
        grown = records.add(found) or grown
    if grown:
        cache.settle(tenant, user_id, snap)
    out = []
    for seq, cosine, _ in best:
        memory = found.get(seq) or known.get(seq)
        if memory is not None:
            out.append(ScoredMemory(memory, cosine))
    return out
