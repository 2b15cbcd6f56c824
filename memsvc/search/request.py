"""What one search asks: :class:`SearchRequest`, and the :class:`Scope` of memories it may return.

Every mode takes the request whole (:mod:`.modes`), so a field added here
reaches every mode, and the functions that pass it on need no new
parameter. What decides which memories may be returned at all (a time
interval, kinds of memories, ...) belongs in :class:`Scope`: it is applied
before ranking on every path, cached or not.
"""

from __future__ import annotations

import dataclasses
import typing as t

import numpy as np

from ..models import DateSpan
from ..models import Selection
from ..store import Entry
from ..store.vector_source import KIND_CODES
from ..store.vector_source import SUPERSEDED
from .filters import Filter
from .filters import MetadataBudget
from .snapshot import Snapshot


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
    #: Kinds, time bounds, as of when, superseded facts or not.
    selection: Selection = Selection()

    def admits(self, entry: Entry) -> bool:
        """Whether one memory qualifies (the uncached path)."""
        if entry.expires_at is not None and entry.expires_at <= self.now:
            return False
        if self.created_after is not None and entry.created_at <= self.created_after:
            return False
        if self.created_before is not None and entry.created_at >= self.created_before:
            return False
        if not self._selects(entry):
            return False
        return (
            not self.filter or self.filter.parse_if_matches(entry.metadata, self.budget) is not None
        )

    def _selects(self, entry: Entry) -> bool:
        """:meth:`~memsvc.models.Selection.admits`, on what search knows of a memory."""
        chosen = self.selection
        if chosen.kinds is not None and entry.mark & ~SUPERSEDED not in _codes(chosen.kinds):
            return False
        if chosen.occurred_after is not None and entry.time <= chosen.occurred_after:
            return False
        if chosen.occurred_before is not None and entry.time >= chosen.occurred_before:
            return False
        if chosen.as_of is not None:
            if entry.time > chosen.as_of:
                return False
            if chosen.include_superseded:
                return True
            return entry.valid_to is None or entry.valid_to > chosen.as_of
        return chosen.include_superseded or not entry.mark & SUPERSEDED

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
        self._select_in(snap, out)
        if self.filter:
            out &= snap.columns.mask(self.filter, self.budget)
        return out

    def _select_in(self, snap: Snapshot, out: np.ndarray) -> None:
        """Narrow ``out`` to what the selection admits (:meth:`_selects`, on columns)."""
        chosen, m = self.selection, snap.m
        marks = snap.marks[:m]
        if chosen.kinds is not None:
            out &= np.isin(marks & ~SUPERSEDED, list(_codes(chosen.kinds)))
        times = snap.times[:m]
        if chosen.occurred_after is not None:
            out &= times > chosen.occurred_after
        if chosen.occurred_before is not None:
            out &= times < chosen.occurred_before
        if chosen.as_of is not None:
            out &= times <= chosen.as_of
            if not chosen.include_superseded:
                valid_to = snap.valid_to[:m]
                out &= (valid_to == 0) | (valid_to > chosen.as_of)
        elif not chosen.include_superseded:
            out &= (marks & SUPERSEDED) == 0


def _codes(kinds: frozenset[str]) -> frozenset[int]:
    return frozenset(KIND_CODES[kind] for kind in kinds)


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """One search of one user's memories.

    ``vector``: the query's embedding; ``text``: the query as written (the
    keyword index reads it); the ``k`` best of the memories the ``scope``
    admits whose cosine is at least ``threshold``, ranked as ``mode`` says
    (:data:`.modes.MODES`).
    """

    tenant: str
    user_id: str
    vector: np.ndarray
    text: str
    k: int
    threshold: float
    scope: Scope
    mode: str = "semantic"
    #: The time the query names ("last week"), resolved against the call's
    #: ``now``; None: it names none, or time ranking is off.
    interval: DateSpan | None = None
    #: Whether memories inside ``interval`` rank higher in semantic and
    #: keyword mode too (hybrid always ranks by it when it is set).
    time_on: bool = False
    #: Embeds another text as the query was (hybrid: the query without the
    #: speakers' names); None: the search does without.
    embed: t.Callable[[str], np.ndarray] | None = dataclasses.field(default=None, compare=False)

    def deeper(self, k: int) -> SearchRequest:
        """The same search, for the ``k`` best."""
        return dataclasses.replace(self, k=k)
