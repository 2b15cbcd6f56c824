"""Scoring a cached user: every memory of a snapshot at once, then the candidates exactly.

A scan scores every row with one matrix product (float32), keeps each
memory's best row, leaves out what the request's scope excludes, and
nominates the memories that could be among the ``k`` best
(:func:`.exact.candidates`); they are ranked exactly (:func:`.exact.rank`).
Also the exact cosines of given memories (:func:`cosines`), from a snapshot
or the store, for the keyword index's matches.
"""

from __future__ import annotations

import numpy as np

from ..store import Entry
from ..store import VectorSource
from .exact import Candidates
from .exact import candidates
from .exact import rank
from .exact import similarities
from .request import SearchRequest
from .snapshot import Snapshot

#: A ranked memory: ``(seq, cosine, created)``.
Ranked = tuple[int, float, int]


def scan(snap: Snapshot, request: SearchRequest) -> list[Ranked]:
    """Score every memory of a snapshot, then rank the candidates exactly."""
    return rank_in(snap, nominate(snap, request)[0], request)


def nominate(snap: Snapshot, request: SearchRequest) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of a snapshot's scan, as positions of its memories, and their scores."""
    scores = snap.entry_scores(snap.row_scores(request.vector))
    admitted = np.flatnonzero(request.scope.mask(snap))
    k, threshold = request.k, request.threshold
    if len(admitted) == len(scores):  # all of them (no filter, nothing expired)
        idx = candidates(scores, k, threshold)
    else:
        # Only the admitted memories compete: numpy's partition is ten times
        # slower over an array that is mostly -inf (a 1% filter).
        idx = admitted[candidates(scores[admitted], k, threshold)]
    return idx, scores[idx]


def rank_in(snap: Snapshot, idx: np.ndarray, request: SearchRequest) -> list[Ranked]:
    """The candidates at positions ``idx`` of a snapshot, ranked exactly."""
    rows, owner = snap.rows_of(idx)
    found = Candidates(snap.take(rows), owner, snap.seqs[idx], snap.created[idx])
    return rank(found, request.vector, request.k, request.threshold)


def of_entries(source: VectorSource, request: SearchRequest, entries: list[Entry]) -> Candidates:
    """These memories' vectors, read from the store, to rank."""
    vids = np.concatenate([np.arange(e.first_vid, e.first_vid + e.windows) for e in entries])
    owner = np.repeat(np.arange(len(entries)), [e.windows for e in entries])
    return Candidates(
        source.vectors(request.tenant, request.user_id, vids),
        owner,
        np.array([e.seq for e in entries], dtype=np.int64),
        np.array([e.created_at for e in entries], dtype=np.int64),
    )


def cosines(
    source: VectorSource, request: SearchRequest, entries: list[Entry], snapshot: Snapshot | None
) -> dict[int, float]:
    """Each memory's exact similarity to the query (its best window's), by seq.

    From the ``snapshot``'s matrix when it holds them all (the same stored
    vectors, so the same numbers), else read from the store.
    """
    if not entries:
        return {}
    seqs = np.array([e.seq for e in entries], dtype=np.int64)
    at = snapshot.positions(seqs) if snapshot is not None else None
    if snapshot is not None and at is not None:
        rows, owner = snapshot.rows_of(at)
        sims = similarities(snapshot.take(rows), owner, len(entries), request.vector)
        return dict(zip(seqs.tolist(), sims.tolist(), strict=True))
    found = of_entries(source, request, entries)
    sims = similarities(found.vectors, found.owner, len(entries), request.vector)
    return {e.seq: float(s) for e, s in zip(entries, sims, strict=True)}


def unit_vectors(
    source: VectorSource, request: SearchRequest, entries: list[Entry], snapshot: Snapshot | None
) -> np.ndarray:
    """These memories' directions, a unit row each (a long memory's windows averaged).

    From the ``snapshot`` when it holds them all, else read from the store.
    """
    if not entries:
        return np.zeros((0, len(request.vector)), dtype=np.float64)
    seqs = np.array([e.seq for e in entries], dtype=np.int64)
    at = snapshot.positions(seqs) if snapshot is not None else None
    if snapshot is not None and at is not None:
        rows, owner = snapshot.rows_of(at)
        vectors = snapshot.take(rows)
    else:
        found = of_entries(source, request, entries)
        vectors, owner = found.vectors, found.owner
    vectors = np.asarray(vectors, dtype=np.float64)
    out = np.zeros((len(entries), vectors.shape[1]))
    np.add.at(out, owner, vectors / np.maximum(np.linalg.norm(vectors, axis=1), 1e-12)[:, None])
    return out / np.maximum(np.linalg.norm(out, axis=1), 1e-12)[:, None]
