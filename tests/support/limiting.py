"""What the limiter tests share: a clock the test moves, and an admit that says "refused"."""

from __future__ import annotations

import typing as t

from memsvc.limits import Limits
from memsvc.limits import Refused

S = 1000  # ms
RATE_ONLY = Limits(100, 0)


class Clock:
    """Milliseconds that pass only when a test moves ``now``."""

    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def admit(limiter: t.Any, limits: Limits, key: str = "k") -> t.Any:
    """The limiter's token for a call, or ``"refused"``."""
    try:
        return limiter.acquire(key, limits)
    except Refused:
        return "refused"
