"""Time as memsvc stores it (epoch milliseconds) and shows it (ISO 8601)."""

from __future__ import annotations

import functools
import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@functools.lru_cache(maxsize=16_384)
def iso(ms: int) -> str:
    """``2026-11-22T04:08:00.123Z``, as JavaScript's ``toISOString`` writes it.

    Remembered for the last 16,384 instants: the memories answered now are
    often those answered a moment ago.
    """
    seconds, millis = divmod(ms, 1000)
    days, second_of_day = divmod(seconds, 86_400)
    date = _DATES.get(days)
    if date is None:
        date = _date(days)
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    return f"{date}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"


#: Day number (since 1970-01-01) -> its date's text: every answer's timestamps
#: fall on a few days, and gmtime was most of an answer's shaping.
_DATES: dict[int, str] = {}


def _date(days: int) -> str:
    t = time.gmtime(days * 86_400)
    date = f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    if len(_DATES) >= 4096:
        _DATES.clear()
    _DATES[days] = date
    return date
