"""Exact search of one user's memories: the whole algorithm, in one place.

:func:`nearest` runs one search inside one read transaction (for a user
whose cached vectors are current, one read without a transaction: see
:func:`_from_cache`):

1. read the user's change counters (one indexed row);
2. take the user's vectors from the cache (:mod:`.cache`: this worker's
   memory, or for a large user a snapshot file every worker of the box
   maps), brought up to date with those counters, score every window with one
   matrix product and keep each memory's best; or, for a user the cache does
   not hold, gather candidates with sqlite-vec's KNN, fetching more until no
   memory past the last one fetched could still make the cut;
3. leave out what the :class:`Scope` excludes (expired memories, metadata
   filters, creation times) *before* ranking, so the answer holds the
   ``limit`` best memories among those that qualify;
4. rank the candidates exactly (:mod:`.exact`): float64 cosine of every
   window, a memory scoring as its best window, threshold, ties to the
   newest;
5. load the winning memories' rows, once; or, for a snapshot that is
   current, take those it kept from earlier searches (the user's counters
   unchanged, none of their memories changed) and read only the others.

The cached and uncached paths nominate candidates differently and rank them
with the same arithmetic and the same filter semantics, so they return the
same answer.

:func:`search` adds the other modes: ``keyword`` (the user's own keyword
index, ranked by BM25, :mod:`.keyword`) and ``hybrid`` (semantic and keyword candidates ordered by
cosine raised by the keyword match's strength). In every mode a result's
similarity is its exact cosine and the threshold a floor on it.
"""

from __future__ import annotations

import dataclasses
import typing as t

import numpy as np

from .. import terms
from ..models import Memory
from ..models import ScoredMemory
from ..observability import metrics
from ..store import Entry
from ..store import UserState
from ..store import VectorSource
from . import cache as cache_module
from . import keyword as keyword_module
from .cache import SearchCache
from .cache import Snapshot
from .exact import candidates
from .exact import rank
from .exact import scan_complete
from .exact import similarities
from .filters import Filter
from .filters import MetadataBudget
from .keyword import hybrid_score

__all__ = ["MODES", "Scope", "SearchCache", "nearest", "search"]

MODES = ("semantic", "keyword", "hybrid")


@dataclasses.dataclass(frozen=True)
class Scope:
    """Which of a user's memories a search or a listing may return."""

    #: Memories expired at this time (epoch ms) are invisible.
    now: int
    filter: Filter | None = None
    #: Exclusive bounds on ``createdAt`` (epoch ms).
    created_after: int | None = None
    created_before: int | None = None
    #: What the call's filter may read of metadata (each call has its own).
    budget: MetadataBudget = dataclasses.field(default_factory=MetadataBudget, compare=False)

    def admits(self, entry: Entry) -> bool:
        """Whether one memory qualifies (the uncached path)."""
        if entry.expires_at is not None and entry.expires_at <= self.now:
            return False
        if self.created_after is not None and entry.created_at <= self.created_after:
            return False
        if self.created_before is not None and entry.created_at >= self.created_before:
            return False
        return (
            not self.filter or self.filter.parse_if_matches(entry.metadata, self.budget) is not None
        )

    def mask(self, snap: Snapshot) -> np.ndarray:
        """Which memories of a cached user qualify, as a boolean array over ``[:m]``."""
        m = snap.m
        expires = snap.expires[:m]
        out = snap.alive[:m] & ((expires == 0) | (expires > self.now))
        created = snap.created[:m]
        if self.created_after is not None:
            out &= created > self.created_after
        if self.created_before is not None:
            out &= created < self.created_before
        if self.filter:
            out &= snap.columns.mask(self.filter, self.budget)
        return out


def nearest(
    store: VectorSource,
    cache: SearchCache | None,
    tenant: str,
    user_id: str,
    query: np.ndarray,
    k: int,
    threshold: float,
    scope: Scope,
) -> list[ScoredMemory]:
    """A user's ``k`` memories most similar to ``query`` with similarity >= ``threshold``.

    Only memories the ``scope`` admits; most similar first, ties to the
    newest; exact whichever path is taken.
    """
    found = _from_cache(store, cache, tenant, user_id, query, k, threshold, scope)
    if found is not None:
        return found
    with store.read():
        hits, snap = _semantic(store, cache, tenant, user_id, query, k, threshold, scope)
        return _memories(store, hits, keep=_Keep(cache, tenant, user_id, snap))


#: Floats (rows x dimensions) up to which a cached user is searched before
#: checking that the cache is current: 4 MB, a scan about as long as one
#: round trip to PostgreSQL. Past that, a scan wasted on an out-of-date
#: snapshot would cost more than the round trips saved.
SCAN_FIRST_FLOATS = 1 << 20

#: Candidates beyond ``k`` up to which a store that reads ahead is asked for
#: all the scan's candidates it lacks while they are ranked
#: (:meth:`VectorSource.memories_ahead`): a few more rows read, for a round trip
#: under way meanwhile. Past that (a threshold of 0 can make every memory a
#: candidate), it reads the winners it lacks once they are known. A winner
#: not asked for ahead (rare: a float32 near-tie) is read after, again.
AHEAD_CANDIDATES = 16


def _from_cache(
    store: VectorSource,
    cache: SearchCache | None,
    tenant: str,
    user_id: str,
    query: np.ndarray,
    k: int,
    threshold: float,
    scope: Scope,
) -> list[ScoredMemory] | None:
    """:func:`nearest` from the user's cached snapshot, if it is current; else None.

    The snapshot is scanned first, then the user's counters and the winning
    memories are read at one instant (:meth:`VectorSource.memories_if_current`):
    the counters unchanged, the answer is the one a read transaction would
    give, for one read of the store instead of two in a transaction (one
    round trip to PostgreSQL instead of four). Winners an earlier search
    answered as of the same counters are the snapshot's :class:`~.cache.Records`:
    when it holds them all, the counters alone are read. Changed (a write
    came in between), the caller searches the usual way, which brings the
    snapshot up to date. Only for users small enough (:data:`SCAN_FIRST_FLOATS`).
    A store that reads ahead (PostgreSQL) is asked for the counters and the
    candidates it lacks as soon as the scan has them, and answers once they
    are ranked (:meth:`VectorSource.memories_ahead`).
    """
    snap = cache.peek(tenant, user_id) if cache is not None else None
    if (
        snap is None
        or cache is None
        or snap.n * snap.matrix.shape[1] > SCAN_FIRST_FLOATS
        # Vectors of another size: of the embedder before a re-embedding.
        or snap.matrix.shape[1] != len(query)
    ):
        return None
    idx, scores = _nominate(snap, query, k, threshold, scope)
    records = snap.records
    known = records.found
    ahead: list[int] | None = None
    if store.reads_ahead:
        # The store may read while the candidates are ranked (PostgreSQL: the
        # statement is under way meanwhile): the counters alone if the likely
        # winners (the best float32 scores, over the threshold) were answered
        # before, else the candidates it lacks, if few.
        seqs = snap.seqs[idx]
        best_first = np.argsort(-scores, kind="stable")[:k]
        likely = seqs[best_first[scores[best_first] >= threshold]].tolist()
        if all(seq in known for seq in likely):
            ahead = []
        else:
            unknown = [seq for seq in seqs.tolist() if seq not in known]
            ahead = unknown if len(unknown) <= k + AHEAD_CANDIDATES else None
    with store.memories_ahead(tenant, user_id, snap.state, ahead) as read:
        best = _rank(snap, idx, query, k, threshold)
        # The winners it lacks; with none, the counters alone are read (the
        # user's memories are those answered before while they are unchanged).
        found = read([seq for seq, _, _ in best if seq not in known])
    if found is None:
        return None
    grown = bool(scope.filter)  # it may have built filter columns
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


@dataclasses.dataclass(frozen=True)
class _Hit:
    """A memory a search found, before its record is read."""

    seq: int
    cosine: float
    created: int
    #: The keyword match's BM25 score and strength (:mod:`.keyword`), if it matched.
    bm25: float | None = None
    strength: float | None = None


@dataclasses.dataclass(frozen=True)
class _Keep:
    """Where the memories a search reads are kept: the user's snapshot, current in its read."""

    cache: SearchCache | None
    tenant: str
    user_id: str
    snap: Snapshot | None

    def add(self, found: dict[int, Memory]) -> None:
        if self.snap is not None and self.cache is not None and self.snap.records.add(found):
            self.cache.settle(self.tenant, self.user_id, self.snap)


def _memories(
    store: VectorSource,
    hits: list[_Hit],
    *,
    keep: _Keep | None = None,
    **fields: t.Callable[[_Hit], t.Any],
) -> list[ScoredMemory]:
    """The found memories' records, read once, in the order of ``hits``.

    ``fields``: more :class:`ScoredMemory` fields, each computed from a hit.
    ``keep``: the snapshot the hits came from, current in the same read
    transaction, keeps the records for later searches (see :func:`_from_cache`).
    """
    found = store.memories_by_seq([hit.seq for hit in hits])
    if keep is not None:
        keep.add(found)
    return [
        ScoredMemory(found[hit.seq], hit.cosine, **{n: f(hit) for n, f in fields.items()})
        for hit in hits
        if hit.seq in found
    ]


def _semantic(
    store: VectorSource,
    cache: SearchCache | None,
    tenant: str,
    user_id: str,
    query: np.ndarray,
    k: int,
    threshold: float,
    scope: Scope,
) -> tuple[list[_Hit], Snapshot | None]:
    """:func:`nearest`'s hits, and the snapshot they came from (None: through the store).

    Call inside a read transaction.
    """
    state = store.user_state(tenant, user_id)
    if state is None or state.count == 0:
        if cache is not None:
            cache.forget(tenant, user_id)
        return [], None
    snapshot = cache.current(store, tenant, user_id, state) if cache is not None else None
    if snapshot is not None:
        best = _scan(snapshot, query, k, threshold, scope)
        if scope.filter and cache is not None:
            cache.settle(tenant, user_id, snapshot)  # it may have built filter columns
    else:
        best = _knn(store, tenant, user_id, state, query, k, threshold, scope)
    return [_Hit(seq, cosine, created) for seq, cosine, created in best], snapshot


def _scan(
    snap: Snapshot, query: np.ndarray, k: int, threshold: float, scope: Scope
) -> list[tuple[int, float, int]]:
    """Score every memory of a snapshot, then rank the candidates exactly."""
    return _rank(snap, _nominate(snap, query, k, threshold, scope)[0], query, k, threshold)


def _nominate(
    snap: Snapshot, query: np.ndarray, k: int, threshold: float, scope: Scope
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of a snapshot's scan, as positions of its memories, and their scores."""
    scores = snap.entry_scores(snap.row_scores(query))
    admitted = np.flatnonzero(scope.mask(snap))
    if len(admitted) == len(scores):  # all of them (no filter, nothing expired)
        idx = candidates(scores, k, threshold)
    else:
        # Only the admitted memories compete: numpy's partition is ten times
        # slower over an array that is mostly -inf (a 1% filter).
        idx = admitted[candidates(scores[admitted], k, threshold)]
    return idx, scores[idx]


def _rank(
    snap: Snapshot, idx: np.ndarray, query: np.ndarray, k: int, threshold: float
) -> list[tuple[int, float, int]]:
    """The candidates at positions ``idx`` of a snapshot, ranked exactly."""
    rows, owner = snap.rows_of(idx)
    return rank(snap.take(rows), owner, snap.seqs[idx], snap.created[idx], query, k, threshold)


def _knn(
    store: VectorSource,
    tenant: str,
    user_id: str,
    state: UserState,
    query: np.ndarray,
    k: int,
    threshold: float,
    scope: Scope,
) -> list[tuple[int, float, int]]:
    """The uncached path: sqlite-vec KNN candidates, widened until complete, ranked exactly.

    KNN returns windows most similar first, so a memory's first window in
    the list is its best: memories rank by first appearance. Memories the
    scope excludes are passed over, so a selective filter widens the scan,
    up to reading the whole user.
    """
    fetch = min(k + 16, store.knn_max)
    while True:
        rows = store.knn(tenant, user_id, query, fetch)
        owners = store.owners(tenant, user_id, [row[0] for row in rows])
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
        if fetch == store.knn_max:
            # Thousands of near-ties, or a selective scope: read everything.
            whole = cache_module.load(store, tenant, user_id, state)
            assert whole is not None
            return _scan(whole, query, k, threshold, scope)
        fetch = min(fetch * 4, store.knn_max)
    if not found:
        return []
    scores = np.array([score for _, score in found], dtype=np.float32)
    chosen = [found[i][0] for i in candidates(scores, k, threshold)]
    if not chosen:
        return []
    vids = np.concatenate([np.arange(e.first_vid, e.first_vid + e.windows) for e in chosen])
    owner = np.repeat(np.arange(len(chosen)), [e.windows for e in chosen])
    vectors = store.vectors(tenant, user_id, vids)
    seqs = np.array([e.seq for e in chosen], dtype=np.int64)
    created = np.array([e.created_at for e in chosen], dtype=np.int64)
    return rank(vectors, owner, seqs, created, query, k, threshold)


def search(
    store: VectorSource,
    cache: SearchCache | None,
    tenant: str,
    user_id: str,
    query: np.ndarray,
    text: str,
    k: int,
    threshold: float,
    scope: Scope,
    mode: str = "semantic",
) -> list[ScoredMemory]:
    """Search in ``mode``: semantic (:func:`nearest`), keyword or hybrid.

    ``keyword``: the memories matching any of the query's words, strongest
    match first. ``hybrid``: the best semantic and keyword candidates
    together, ordered by :func:`.keyword.hybrid_score`. Either way each
    result's ``similarity`` is its cosine and ``threshold`` a floor on it.
    Only the answer's memories are read, once.
    """
    if mode == "semantic":
        found = _from_cache(store, cache, tenant, user_id, query, k, threshold, scope)
        if found is not None:
            metrics.searched(mode, True)
            return found
        with store.read():
            hits, snap = _semantic(store, cache, tenant, user_id, query, k, threshold, scope)
            metrics.searched(mode, snap is not None)
            return _memories(store, hits, keep=_Keep(cache, tenant, user_id, snap))
    with store.read():  # both halves of a hybrid search see one snapshot
        if mode == "keyword":
            snapshot = _snapshot(store, cache, tenant, user_id)
            metrics.searched(mode, snapshot is not None)
            hits = _keyword(store, tenant, user_id, query, text, k, threshold, scope, snapshot)
            return _memories(
                store,
                hits,
                matched_by=lambda _: ("keyword",),
                keyword=lambda hit: hit.strength,
                score=lambda hit: hit.bm25,
            )
        depth = min(100, max(2 * k, 30))
        semantic, snap = _semantic(store, cache, tenant, user_id, query, depth, threshold, scope)
        metrics.searched(mode, snap is not None)
        keyword = _keyword(store, tenant, user_id, query, text, depth, threshold, scope, snap)
        by_seq = {hit.seq: hit for hit in semantic}
        by_seq.update({hit.seq: hit for hit in keyword})  # the same cosine, and its strength
        semantic_seqs = {hit.seq for hit in semantic}
        ranked = sorted(
            by_seq.values(),
            key=lambda hit: (-hybrid_score(hit.cosine, hit.strength), -hit.created, -hit.seq),
        )
        return _memories(
            store,
            ranked[:k],
            matched_by=lambda hit: tuple(
                name
                for name, found in (
                    ("keyword", hit.strength is not None),
                    ("semantic", hit.seq in semantic_seqs),
                )
                if found
            ),
            keyword=lambda hit: hit.strength,
            score=lambda hit: hybrid_score(hit.cosine, hit.strength),
        )


def _keyword(
    store: VectorSource,
    tenant: str,
    user_id: str,
    query: np.ndarray,
    text: str,
    k: int,
    threshold: float,
    scope: Scope,
    snapshot: Snapshot | None = None,
) -> list[_Hit]:
    """The ``k`` best keyword matches the scope admits whose cosine is >= ``threshold``.

    Best first (BM25). Cosines come from the user's cached ``snapshot`` when
    there is one (current in this transaction), else from the store. Call
    inside a read transaction.
    """
    wanted = terms.codes(text)
    state = store.user_state(tenant, user_id) if wanted else None
    if state is None:
        return []
    matches = keyword_module.rank(
        store.postings(state.user_key, list(wanted)), wanted, state.count, state.terms
    )
    seqs = matches.seqs.tolist()
    scores = zip(matches.bm25.tolist(), matches.strength.tolist(), strict=True)
    found = dict(zip(seqs, scores, strict=True))
    best: list[_Hit] = []
    start, chunk = 0, max(4 * k, 40)
    # Best first, a growing chunk at a time, until k qualify.
    while start < len(seqs) and len(best) < k:
        part = seqs[start : start + chunk]
        entries = store.entries_by_seq(tenant, user_id, part)
        admitted = [entries[seq] for seq in part if seq in entries and scope.admits(entries[seq])]
        cosine = _cosines(store, tenant, user_id, admitted, query, snapshot)
        best += [
            _Hit(e.seq, cosine[e.seq], e.created_at, *found[e.seq])
            for e in admitted
            if cosine[e.seq] >= threshold
        ]
        start += chunk
        chunk *= 4
    return best[:k]


def _snapshot(
    store: VectorSource, cache: SearchCache | None, tenant: str, user_id: str
) -> Snapshot | None:
    """The user's cached snapshot, current in this read transaction; None without one."""
    if cache is None:
        return None
    state = store.user_state(tenant, user_id)
    return cache.current(store, tenant, user_id, state) if state is not None else None


def _cosines(
    store: VectorSource,
    tenant: str,
    user_id: str,
    entries: list[Entry],
    query: np.ndarray,
    snapshot: Snapshot | None = None,
) -> dict[int, float]:
    """Each memory's exact similarity to ``query`` (its best window's), by seq.

    From the ``snapshot``'s matrix when it holds them all (the same stored
    vectors, so the same numbers), else read from the store.
    """
    if not entries:
        return {}
    seqs = np.array([e.seq for e in entries], dtype=np.int64)
    at = snapshot.positions(seqs) if snapshot is not None else None
    if snapshot is not None and at is not None:
        rows, owner = snapshot.rows_of(at)
        sims = similarities(snapshot.take(rows), owner, len(entries), query)
        return dict(zip(seqs.tolist(), sims.tolist(), strict=True))
    vids = np.concatenate([np.arange(e.first_vid, e.first_vid + e.windows) for e in entries])
    owner = np.repeat(np.arange(len(entries)), [e.windows for e in entries])
    sims = similarities(store.vectors(tenant, user_id, vids), owner, len(entries), query)
    return {e.seq: float(s) for e, s in zip(entries, sims, strict=True)}
