"""Time as memsvc stores it (epoch milliseconds) and shows it (ISO 8601)."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso(ms: int) -> str:
    """``2026-11-22T04:08:00.123Z``, as JavaScript's ``toISOString`` writes it."""
    seconds, millis = divmod(ms, 1000)
    t = time.gmtime(seconds)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{millis:03d}Z"
    )
