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
from .conversation import inside
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
    """The request's ``k`` best memories, as its mode ranks them.

    Semantic and keyword mode with ``time_on`` and a query naming a time:
    of a deeper search's results, those inside the interval first, each
    group in the mode's order (hybrid ranks by time itself).
    """
    run = _SEARCHES[request.mode]
    interval = request.interval
    if request.mode == "hybrid" or not request.time_on or interval is None:
        return run(source, cache, request)
    found = run(source, cache, request.deeper(min(100, max(3 * request.k, 30))))
    first = [r for r in found if inside(r.memory, interval)]
    rest = [r for r in found if not inside(r.memory, interval)]
    return (first + rest)[: request.k]
