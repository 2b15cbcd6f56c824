"""A bounded, per-worker cache of embeddings, for the search path.

Agents ask the same questions again and again ("what does the user like to
eat?"), and embedding the question is most of a search's time. The cache
keys on the exact text within a scope (:meth:`CachedEmbedder.scoped`: one
per tenant). Each scope has entries of its own, at most ``max_entries``
vectors, its least recently used evicted first by its own new ones only:
so how fast a search answers never tells one tenant what, or how much,
another asked (with one shared order, a tenant could count how many
distinct queries the others ran by watching when its own entry went). A
scope that asks nothing for :attr:`CachedEmbedder.IDLE_SECONDS` has its
entries dropped, whatever the others do. A hit costs a dictionary look-up
and a copy.
"""

from __future__ import annotations

import collections
import threading
import time
import typing as t

import numpy as np

from ..observability import metrics
from .base import Embedder


class _Entries:
    """One scope's entries: texts' vectors and windows, least recently used first."""

    __slots__ = ("vectors", "windows", "used")

    def __init__(self, now: float):
        self.vectors: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
        self.windows: collections.OrderedDict[str, tuple[str, ...]] = collections.OrderedDict()
        self.used = now


class CachedEmbedder(Embedder):
    """An :class:`~memsvc.embeddings.Embedder` remembering each scope's last ``max_entries`` texts.

    ``max_entries=0`` turns caching off. Thread-safe: the lock is held only
    to read and update the cache, never while the wrapped embedder runs, so
    two threads missing on the same text both embed it (harmless: the
    vectors are the same).
    """

    #: A scope that asked nothing for this long starts afresh (its entries are dropped).
    IDLE_SECONDS = 900.0

    def __init__(self, embedder: Embedder, max_entries: int):
        if max_entries < 0:
            raise ValueError("max_entries must be 0 (off) or more")
        self.embedder = embedder
        self.max_entries = max_entries
        self.model_id = embedder.model_id
        self.dimensions = embedder.dimensions
        self.batch_invariant = embedder.batch_invariant
        self.hits = 0
        self.misses = 0
        self._scopes: dict[str, _Entries] = {}
        self._swept = _now()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries.vectors) for entries in self._scopes.values())

    def scoped(self, scope: str) -> Scoped:
        """This cache as an embedder whose entries only ``scope`` shares (a tenant)."""
        return Scoped(self, scope)

    @property
    def max_tokens(self) -> int | None:
        return self.embedder.max_tokens

    def _entries(self, scope: str) -> _Entries:
        """``scope``'s entries, as of now (hold the lock)."""
        now = _now()
        entries = self._scopes.get(scope)
        if entries is None or now - entries.used > self.IDLE_SECONDS:
            entries = self._scopes[scope] = _Entries(now)
        entries.used = now
        if now - self._swept > self.IDLE_SECONDS:  # the memory of scopes gone idle goes back
            self._swept = now
            for name in [n for n, e in self._scopes.items() if now - e.used > self.IDLE_SECONDS]:
                del self._scopes[name]
        return entries

    def windows(self, text: str, *, scope: str = "") -> list[str]:
        """The wrapped embedder's windows of ``text``, remembered as its vectors are.

        A local model tokenizes a text longer than a window to cut it (24 us
        for a 100-character question), and a search asks twice: to count
        what embedding it costs, then to embed it.
        """
        if self.max_entries == 0:
            return self.embedder.windows(text)
        with self._lock:
            kept = self._entries(scope).windows
            found = kept.get(text)
            if found is not None:
                kept.move_to_end(text)
                return list(found)
        pieces = self.embedder.windows(text)
        with self._lock:
            kept = self._entries(scope).windows
            kept[text] = tuple(pieces)
            while len(kept) > self.max_entries:
                kept.popitem(last=False)
        return list(pieces)

    def prepare(self) -> None:
        self.embedder.prepare()

    def warm_up(self) -> None:
        """Get the wrapped embedder ready."""
        self.embedder.warm_up()

    def embed(self, texts: t.Sequence[str], *, scope: str = "") -> np.ndarray:
        """One unit-length float32 row per text, from ``scope``'s entries where it can."""
        if self.max_entries == 0:
            return self.embedder.embed(texts)
        # A new array every call: a caller that writes into its result must
        # not change what the next caller gets.
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            kept = self._entries(scope).vectors
            for row, text in enumerate(texts):
                vector = kept.get(text)
                if vector is None:
                    missing.setdefault(text, []).append(row)
                else:
                    kept.move_to_end(text)
                    out[row] = vector
            misses = sum(len(rows) for rows in missing.values())
            self.hits += len(texts) - misses
            self.misses += misses
        metrics.query_cache(len(texts) - misses, misses)
        if not missing:
            return out
        fresh = list(missing)
        vectors = self.embedder.embed(fresh)
        with self._lock:
            kept = self._entries(scope).vectors
            for text, vector in zip(fresh, vectors, strict=True):
                out[missing[text]] = vector
                copy = np.array(vector, dtype=np.float32)  # a copy, not a view of ``vectors``
                copy.setflags(write=False)
                kept[text] = copy
                kept.move_to_end(text)
            while len(kept) > self.max_entries:
                kept.popitem(last=False)
        return out


def _now() -> float:
    return time.monotonic()


class Scoped(Embedder):
    """A :class:`CachedEmbedder` seen by one scope: an embedder like any other."""

    def __init__(self, cache: CachedEmbedder, scope: str):
        self.cache = cache
        self.scope = scope
        self.model_id = cache.model_id
        self.dimensions = cache.dimensions
        self.batch_invariant = cache.batch_invariant

    @property
    def max_tokens(self) -> int | None:
        return self.cache.max_tokens

    def windows(self, text: str) -> list[str]:
        return self.cache.windows(text, scope=self.scope)

    def prepare(self) -> None:
        self.cache.prepare()

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        return self.cache.embed(texts, scope=self.scope)

    def warm_up(self) -> None:
        self.cache.warm_up()
