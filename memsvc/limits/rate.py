"""The rate limit: at most N accepted calls in any rolling 60 seconds, read from a key's ring."""

from __future__ import annotations

import math

from .contract import WINDOW_MS
from .contract import Limits
from .contract import Refused
from .key_file import KeyState


def check_rate(state: KeyState, limits: Limits, units: int, retry_units: int, now: int) -> None:
    """Raise :class:`Refused` unless ``units`` more calls fit in the key's window.

    The ring holds the times of the key's last calls (at least N of them),
    oldest first from its head, so its ``k``-th most recent is at ``head -
    k``: ``units`` more fit when the ``(N - units + 1)``-th most recent has
    left the window (or was never made). ``retry_after`` says when
    ``retry_units`` more would fit. Recording them then overwrites the
    oldest entries, which are older still: nothing in the window is lost.
    """
    head, size, n = state.head, state.layout[0], limits.per_minute
    if not in_window(state.ring_at((head - n + units - 1) % size), now):
        return
    leaves = state.ring_at((head - n + retry_units - 1) % size) + WINDOW_MS
    raise Refused(
        f"Rate limit exceeded: {limits.per_minute} requests per minute",
        max(1, math.ceil((leaves - now) / 1000)),
    )


def in_window(at: int, now: int) -> bool:
    return at != 0 and now - at < WINDOW_MS
