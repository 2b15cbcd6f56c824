"""Search of one user's memories: exact, in three modes, cached or through the store.

A :class:`SearchRequest` (whose memories, the query, how many, the
:class:`Scope` of memories it may return, the mode) goes to :func:`search`,
which runs its mode (:mod:`.modes`): :mod:`.semantic` (the scan of a cached
user, :mod:`.scanning`, or the store's KNN, :mod:`.knn`, ranked exactly by
:mod:`.exact`), :mod:`.keyword` (BM25, :mod:`.bm25`) or :mod:`.hybrid`
(both, fused by named score parts); results are read once (:mod:`.hits`).

What a search reads of a store is :class:`~memsvc.store.VectorSource`. A
worker keeps users' vectors in a :class:`SearchCache` (:mod:`.cache`):
snapshots (:mod:`.snapshot`, made by :mod:`.building`), a large user's over
a file every worker of the box maps (:mod:`.sharing`, :mod:`.snapshot_file`,
:mod:`.snapshot_dir`), with the memories answered before (:mod:`.records`)
and metadata columns for filters (:mod:`.filters`, :mod:`.columns`).
"""

from __future__ import annotations

from .cache import SearchCache
from .modes import MODES
from .modes import search
from .request import Scope
from .request import SearchRequest

__all__ = ["MODES", "Scope", "SearchCache", "SearchRequest", "search"]
