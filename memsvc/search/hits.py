"""What a search found, before and after its records are read: :class:`Hit`, :func:`answer`.

Every mode finds hits (a memory's seq, its exact cosine, and what its mode
ranked it by), then reads the winners' records once (:func:`answer`).
"""

from __future__ import annotations

import dataclasses
import typing as t

from ..models import Memory
from ..models import ScoredMemory
from ..store import VectorSource
from .cache import SearchCache
from .snapshot import Snapshot


@dataclasses.dataclass(frozen=True)
class Hit:
    """A memory a search found, before its record is read."""

    seq: int
    cosine: float
    created: int
    #: The keyword match's BM25 score and strength (:mod:`.bm25`), if it matched.
    bm25: float | None = None
    strength: float | None = None


@dataclasses.dataclass(frozen=True)
class Keep:
    """Where the memories a search reads are kept: the user's snapshot, current in its read."""

    cache: SearchCache | None
    tenant: str
    user_id: str
    snap: Snapshot | None

    def add(self, found: dict[int, Memory]) -> None:
        if self.snap is not None and self.cache is not None and self.snap.records.add(found):
            self.cache.settle(self.tenant, self.user_id, self.snap)


def answer(
    source: VectorSource,
    hits: t.Sequence[Hit],
    scored: t.Callable[[Memory, Hit], ScoredMemory],
    keep: Keep | None = None,
) -> list[ScoredMemory]:
    """The found memories' records, read once, in the order of ``hits``, each made a result
    by ``scored``.

    ``keep``: the snapshot the hits came from, current in the same read
    transaction, keeps the records for later searches (see :mod:`.semantic`).
    """
    found = source.memories_by_seq([hit.seq for hit in hits])
    if keep is not None:
        keep.add(found)
    return [scored(found[hit.seq], hit) for hit in hits if hit.seq in found]


def by_cosine(memory: Memory, hit: Hit) -> ScoredMemory:
    """A semantic result: the memory and its cosine."""
    return ScoredMemory(memory, hit.cosine)
