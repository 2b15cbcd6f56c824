"""The concurrency limit: at most M calls executing at once, each holding one of a key's slots.

A slot of a process that died, or past its expiry, no longer counts.
"""

from __future__ import annotations

import os

import numpy as np

from .key_file import HEADER_WORDS
from .key_file import SLOT_WORDS
from .key_file import KeyState

#: Slots :func:`free_slot` tries one by one before counting them all.
_PROBES = 4


def free_slot(state: KeyState, now: int, limit: int) -> int | None:
    """A free slot's index if fewer than ``limit`` are held, else None.

    With as many slots as the limit (unless it was lowered while more calls
    held one), any free slot means fewer than ``limit`` are held: a few are
    tried, starting where this process last took one, before all are counted.
    """
    word = state.word
    rate_cap, conc_cap = state.layout
    if word is not None and conc_cap == limit:
        base = HEADER_WORDS + rate_cap
        for probe in range(min(_PROBES, conc_cap)):
            i = (state.hint + probe) % conc_cap
            at = base + SLOT_WORDS * i
            if word[at] == 0 or now >= word[at + 2]:
                return i
    return _count_slots(state.slots, now, limit)


def _count_slots(slots: np.ndarray, now: int, limit: int) -> int | None:
    """:func:`free_slot` by counting every slot held."""
    if len(slots) <= 64:
        # Plain Python beats numpy's per-call overhead on a few rows.
        rows = slots.tolist()
        held = [pid != 0 and now < expiry for pid, _, expiry in rows]
        count = sum(held)
        if count >= limit:
            # Before refusing, drop the slots of processes that no longer exist.
            for i, is_held in enumerate(held):
                pid, _, expiry = rows[i]
                if is_held and not alive(pid, expiry, now):
                    slots[i] = 0
                    held[i] = False
                    count -= 1
            if count >= limit:
                return None
        return held.index(False) if False in held else None
    # Many rows (a high concurrency limit): no Python loop over them all.
    mask = (slots[:, 0] != 0) & (slots[:, 2] > now)
    count = int(np.count_nonzero(mask))
    if count >= limit:
        for i in np.flatnonzero(mask).tolist():
            pid, _, expiry = slots[i].tolist()
            if not alive(pid, expiry, now):
                slots[i] = 0
                mask[i] = False
                count -= 1
        if count >= limit:
            return None
    free = int(np.argmin(mask))
    return None if mask[free] else free


def alive(pid: int, expiry: int, now: int) -> bool:
    if now >= expiry:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
