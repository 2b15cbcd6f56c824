"""One search: the request's mode picks the function that runs it.

``semantic`` (:mod:`.semantic`): the memories most similar in meaning,
exactly. ``keyword`` (:mod:`.keyword`): the memories holding the query's
words, by BM25. ``hybrid`` (:mod:`.hybrid`): both, fused. In every mode a
result's similarity is its exact cosine and the threshold a floor on it;
only the answer's memories are read, once. A new mode is one more function
taking a :class:`~.request.SearchRequest`, and one more entry here.
"""

from __future__ import annotations

import typing as t

from ..models import ScoredMemory
from ..store import VectorSource
from . import hybrid
from . import keyword
from . import semantic
from .cache import SearchCache
from .request import SearchRequest

Mode = t.Callable[[VectorSource, SearchCache | None, SearchRequest], list[ScoredMemory]]

_SEARCHES: dict[str, Mode] = {
    "semantic": semantic.search,
    "keyword": keyword.search,
    "hybrid": hybrid.search,
}

#: The search modes, the default first.
MODES = tuple(_SEARCHES)


def search(
    source: VectorSource, cache: SearchCache | None, request: SearchRequest
) -> list[ScoredMemory]:
    """The request's ``k`` best memories, as its mode ranks them."""
    return _SEARCHES[request.mode](source, cache, request)
