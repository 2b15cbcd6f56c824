"""A bounded, per-worker cache of embeddings, for the search path.

Agents ask the same questions again and again ("what does the user like to
eat?"), and embedding the question is most of a search's time. The cache
keys on the exact text within a scope (:meth:`CachedEmbedder.scoped`: one
per tenant, so how fast a search answers never tells one tenant what
another asked), holds at most ``max_entries`` vectors and evicts the least
recently used. A hit costs a dictionary look-up and a copy.
"""

from __future__ import annotations

import collections
import threading
import typing as t

import numpy as np

from ..observability import metrics
from .base import Embedder


class CachedEmbedder(Embedder):
    """An :class:`~memsvc.embeddings.Embedder` that remembers its last ``max_entries`` texts.

    ``max_entries=0`` turns caching off. Thread-safe: the lock is held only
    to read and update the cache, never while the wrapped embedder runs, so
    two threads missing on the same text both embed it (harmless: the
    vectors are the same).
    """

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
        self._vectors: collections.OrderedDict[tuple[str, str], np.ndarray] = (
            collections.OrderedDict()
        )
        self._windows: collections.OrderedDict[tuple[str, str], tuple[str, ...]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def scoped(self, scope: str) -> Scoped:
        """This cache as an embedder whose entries only ``scope`` shares (a tenant)."""
        return Scoped(self, scope)

    @property
    def max_tokens(self) -> int | None:
        return self.embedder.max_tokens

    def windows(self, text: str, *, scope: str = "") -> list[str]:
        """The wrapped embedder's windows of ``text``, remembered as its vectors are.

        A local model tokenizes a text longer than a window to cut it (24 us
        for a 100-character question), and a search asks twice: to count
        what embedding it costs, then to embed it.
        """
        if self.max_entries == 0:
            return self.embedder.windows(text)
        key = (scope, text)
        with self._lock:
            found = self._windows.get(key)
            if found is not None:
                self._windows.move_to_end(key)
                return list(found)
        pieces = self.embedder.windows(text)
        with self._lock:
            self._windows[key] = tuple(pieces)
            while len(self._windows) > self.max_entries:
                self._windows.popitem(last=False)
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
            for row, text in enumerate(texts):
                vector = self._vectors.get((scope, text))
                if vector is None:
                    missing.setdefault(text, []).append(row)
                else:
                    self._vectors.move_to_end((scope, text))
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
            for text, vector in zip(fresh, vectors, strict=True):
                out[missing[text]] = vector
                kept = np.array(vector, dtype=np.float32)  # a copy, not a view of ``vectors``
                kept.setflags(write=False)
                self._vectors[scope, text] = kept
                self._vectors.move_to_end((scope, text))
            while len(self._vectors) > self.max_entries:
                self._vectors.popitem(last=False)
        return out


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
