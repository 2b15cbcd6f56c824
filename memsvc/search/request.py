"""What one search asks: :class:`SearchRequest`, and the :class:`Scope` of memories it may return.

Every mode takes the request whole (:mod:`.modes`), so a field added here
reaches every mode, and the functions that pass it on need no new
parameter. What decides which memories may be returned at all (a time
interval, kinds of memories, ...) belongs in :class:`Scope`: it is applied
before ranking on every path, cached or not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..store import Entry
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

    def deeper(self, k: int) -> SearchRequest:
        """The same search, for the ``k`` best."""
        return dataclasses.replace(self, k=k)
