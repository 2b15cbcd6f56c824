"""Figures the reliability tests measure: printed at the end of the run, never asserted."""

from __future__ import annotations

import os
import threading

#: How many times more examples the property-based tests try (make soak: 10).
SCALE = int(os.environ.get("MEMSVC_SOAK_SCALE", "1"))

_lock = threading.Lock()
#: name -> [count, unit]
_counts: dict[str, list] = {}
_lines: list[str] = []


def count(name: str, n: int = 1, unit: str = "inputs tried") -> None:
    """Add ``n`` to a named tally, e.g. ``count("fuzz")`` per input a fuzz test tried."""
    with _lock:
        _counts.setdefault(name, [0, unit])[0] += n


def report(line: str) -> None:
    """A line for the end-of-run summary; also printed at once (seen with ``-s``)."""
    print(line)
    with _lock:
        _lines.append(line)


def summary() -> list[str]:
    with _lock:
        tallies = [f"{name}: {n} {unit}" for name, (n, unit) in sorted(_counts.items())]
        return tallies + _lines
