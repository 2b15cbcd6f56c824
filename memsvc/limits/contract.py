"""What a limiter is, whichever keeps its state: the limits, the refusal, the bounds.

:class:`KeyLimiter` is kept by :class:`memsvc.limits.Limiter` for the
workers of one box and by :class:`memsvc.store.postgres.limits.PgLimiter`
for every server of one PostgreSQL; both count in the same window, refuse
with the same :class:`Refused`, and take limits up to the same bounds.
"""

from __future__ import annotations

import dataclasses
import typing as t

WINDOW_MS = 60_000
#: Keys that come and go, such as one per client address (the console's
#: sign-in attempts), are named with this prefix. Their files are opened
#: for each use rather than kept open, and :meth:`Limiter.sweep` removes
#: them once idle for two windows, as PostgreSQL's sweep removes any key's
#: rows. An API key's file stays: there is one per key, reused in place.
EPHEMERAL = "ephemeral-"
#: How long a key must be idle before a sweep forgets it: two windows.
IDLE_MS = 2 * WINDOW_MS
MAX_PER_MINUTE = 100_000
MAX_CONCURRENT = 10_000


@dataclasses.dataclass(frozen=True)
class Limits:
    """A key's limits; 0 means unlimited."""

    per_minute: int
    concurrent: int


class KeyLimiter(t.Protocol):
    """What admits or refuses calls per key: :class:`Limiter` for the workers of one box,
    :class:`memsvc.store.postgres.limits.PgLimiter` for every server of one PostgreSQL.

    A token from :meth:`acquire` goes back to :meth:`release` when the call is answered.
    """

    def acquire(self, key_id: str, limits: Limits) -> tuple[int, int] | None:
        """Admit one call or raise :class:`Refused`; returns the token to :meth:`release`."""

    def charge(self, key_id: str, limits: Limits, units: int) -> None:
        """Count ``units`` more calls against the rate, for a call :meth:`acquire` admitted."""

    def release(self, key_id: str, held: tuple[int, int] | None) -> None:
        """Free the concurrency slot a call held."""

    def executing(self, key_id: str) -> int:
        """How many calls of the key hold a slot now."""

    def sweep(self) -> int:
        """Forget what keys idle for a while left behind (housekeeping); how many rows went."""


class Refused(Exception):
    """A call the limits do not admit: ``reason`` is ``rate`` or ``concurrency``."""

    def __init__(self, message: str, retry_after: int, reason: str = "rate"):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.reason = reason


def check_units(units: int, limits: Limits) -> None:
    """A charge of ``units`` more must leave room for the call's first unit in the limit."""
    if units + 1 > limits.per_minute:
        raise ValueError(
            f"a call of {units + 1} units can never fit in a limit of {limits.per_minute} a minute"
        )
