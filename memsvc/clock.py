"""Time as memsvc stores it (epoch milliseconds) and shows it (ISO 8601)."""

from __future__ import annotations

import datetime
import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso(ms: int) -> str:
    """``2026-11-22T04:08:00.123Z``, as JavaScript's ``toISOString`` writes it."""
    seconds, millis = divmod(ms, 1000)
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"
