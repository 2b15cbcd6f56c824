"""Per-key request limits, shared by every worker process on the box.

Two limits per API key:

* **rate**: at most N accepted calls in any rolling 60 seconds. Each key
  keeps a ring of the times of its last accepted calls, at least N of them;
  a call is accepted only if the N-th most recent is 60 s old or more. That
  is exact: no 60-second window, wherever it starts, ever holds more than
  N. A call that costs more (a long text to embed) counts as several:
  :meth:`Limiter.charge` records its extra units once its cost is known, as
  as many entries of the ring, if they fit. When a key's limit is lowered,
  its ring keeps every call still in the window (it never shrinks below
  them), so raising the limit again within the minute lets through exactly
  what the new limit leaves room for.
* **concurrency**: at most M calls executing at once. Each executing call
  holds an entry (process id, call token, expiry) until it is answered.
  An entry of a process that died, or past its expiry, no longer counts, so
  a crashed or killed worker cannot leak slots.

The state of each key lives in its own small memory-mapped file (on tmpfs
where there is one), locked with ``flock`` across processes and a
``threading.Lock`` across the threads of a process. Keys never wait on each
other's locks, and a refused call changes nothing. The state is disposable:
losing it (a reboot, a new directory) only resets the counters.
"""

from __future__ import annotations

from .contract import EPHEMERAL
from .contract import IDLE_MS
from .contract import MAX_CONCURRENT
from .contract import MAX_PER_MINUTE
from .contract import WINDOW_MS
from .contract import KeyLimiter
from .contract import Limits
from .contract import Refused
from .contract import check_units
from .folders import default_directory
from .folders import private_directory
from .limiter import Limiter

__all__ = [
    "EPHEMERAL", "IDLE_MS", "MAX_CONCURRENT", "MAX_PER_MINUTE", "WINDOW_MS", "KeyLimiter",
    "Limiter", "Limits", "Refused", "check_units", "default_directory", "private_directory",
]  # fmt: skip
