"""The limiter of one box: calls admitted or refused per key, consistently across processes."""

from __future__ import annotations

import collections
import fcntl
import itertools
import os
import threading
import time
import typing as t
import weakref

import numpy as np

from .concurrency import alive
from .concurrency import free_slot
from .contract import EPHEMERAL
from .contract import IDLE_MS
from .contract import Limits
from .contract import Refused
from .contract import check_units
from .folders import private_directory
from .key_file import HEADER_WORDS
from .key_file import SLOT_WORDS
from .key_file import KeyState
from .key_file import file_name
from .key_file import locked
from .rate import check_rate


class Limiter:
    """Admits or refuses calls per key, consistently across processes."""

    def __init__(
        self,
        directory: str,
        *,
        slot_ttl_ms: int = 120_000,
        clock: t.Callable[[], int] | None = None,
        max_open: int = 1024,
    ):
        self.directory = private_directory(directory)
        self.slot_ttl_ms = slot_ttl_ms
        # Monotonic: one clock for every process on the box, immune to
        # wall-clock jumps.
        self.clock = clock or (lambda: time.monotonic_ns() // 1_000_000)
        self.max_open = max_open
        self._tokens = itertools.count(1)
        self._forget()
        # Files opened before a fork belong to the parent: a forked worker
        # starts afresh (and never needs to ask for its pid on a hot path).
        me = weakref.ref(self)

        def forget_in_child() -> None:
            limiter = me()
            if limiter is not None:
                limiter._forget()

        os.register_at_fork(after_in_child=forget_in_child)

    def _forget(self) -> None:
        self._pid = os.getpid()
        self._states: collections.OrderedDict[str, KeyState] = collections.OrderedDict()
        self._states_lock = threading.Lock()

    def acquire(self, key_id: str, limits: Limits) -> tuple[int, int] | None:
        """Admit one call or raise :class:`Refused`; returns the token to :meth:`release`."""
        if not limits.per_minute and not limits.concurrent:
            return None
        state = self._state(key_id)
        with locked(state):
            now = self.clock()
            self._prepare(state, limits, now)
            if limits.per_minute:
                check_rate(state, limits, 1, 1, now)
            slot = None
            if limits.concurrent:
                slot = free_slot(state, now, limits.concurrent)
                if slot is None:
                    raise Refused(
                        f"Too many concurrent requests: at most {limits.concurrent} at once "
                        "per API key",
                        1,
                        "concurrency",
                    )
            # Admitted: only now is anything recorded.
            word = state.word
            if limits.per_minute:
                head, size = state.head, state.layout[0]
                if word is not None:
                    word[HEADER_WORDS + head] = now
                    word[3] = (head + 1) % size
                else:
                    state.ring[head] = now
                    state.head = (head + 1) % size
            if slot is None:
                return None
            token = next(self._tokens)
            if word is not None:
                at = HEADER_WORDS + state.layout[0] + SLOT_WORDS * slot
                word[at] = self._pid
                word[at + 1] = token
                word[at + 2] = now + self.slot_ttl_ms
            else:
                state.slots[slot] = (self._pid, token, now + self.slot_ttl_ms)
            state.hint = slot
            return slot, token

    def charge(self, key_id: str, limits: Limits, units: int) -> None:
        """Count ``units`` more calls against the rate, for a call :meth:`acquire` admitted.

        For a call whose cost is known only once its input is read: it was
        admitted as one call, and costs ``1 + units``. If they do not fit in
        the window, raises :class:`Refused` having recorded nothing more (the
        call's first unit stays counted), with a ``retry_after`` that says
        when a new call of the same cost would be admitted.
        """
        if units <= 0 or not limits.per_minute:
            return
        check_units(units, limits)
        state = self._state(key_id)
        with locked(state):
            now = self.clock()
            self._prepare(state, limits, now)
            check_rate(state, limits, units, units + 1, now)
            head, size = state.head, len(state.ring)
            state.ring[(head + np.arange(units)) % size] = now
            state.head = (head + units) % size

    def release(self, key_id: str, held: tuple[int, int] | None) -> None:
        """Free the concurrency slot a call held."""
        if held is None:
            return
        slot, token = held
        state = self._state(key_id)
        with locked(state):
            if not state.load():
                return
            pid = self._pid
            word = state.word
            if word is not None and slot < state.layout[1]:
                at = HEADER_WORDS + state.layout[0] + SLOT_WORDS * slot
                if word[at] == pid and word[at + 1] == token:
                    word[at] = word[at + 1] = word[at + 2] = 0
                    return
            slots = state.slots
            if slot < len(slots) and slots[slot, 0] == pid and slots[slot, 1] == token:
                slots[slot] = 0
                return
            # The layout was rebuilt since (the key's limits changed).
            slots[(slots[:, 0] == pid) & (slots[:, 1] == token)] = 0

    def executing(self, key_id: str) -> int:
        """How many calls of the key hold a slot now."""
        state = self._state(key_id)
        with locked(state):
            if not state.load():
                return 0
            now = self.clock()
            return sum(alive(int(pid), int(exp), now) for pid, _, exp in state.slots if pid)

    def sweep(self) -> int:
        """Remove the files of :data:`EPHEMERAL` keys idle for two windows; how many went.

        Each is removed under its lock, once its calls are past counting and
        it holds no slot. A process that opened it before, and locks it
        after, sees it gone and opens the path again (:meth:`_ephemeral`).
        API keys' files are kept: one window of times each, reused in place.
        """
        removed = 0
        now = self.clock()
        for name in os.listdir(self.directory):
            if not name.startswith(EPHEMERAL):
                continue
            path = os.path.join(self.directory, name)
            try:
                state = KeyState(path, create=False)
            except OSError:
                continue  # removed meanwhile, or not a file of ours
            with locked(state):
                if os.fstat(state.fd).st_nlink and _idle(state, now):
                    os.unlink(path)
                    removed += 1
        return removed

    # -- internals -----------------------------------------------------------------

    def _state(self, key_id: str) -> KeyState:
        state = self._states.get(key_id)
        if state is not None:
            return state
        if key_id.startswith(EPHEMERAL):
            return self._ephemeral(key_id)
        with self._states_lock:
            state = self._states.get(key_id)
            if state is None:
                state = KeyState(os.path.join(self.directory, file_name(key_id)))
                self._states[key_id] = state
                # Forget the oldest; a thread still using one keeps it open
                # until it is done.
                while len(self._states) > self.max_open:
                    self._states.popitem(last=False)
            return state

    def _ephemeral(self, key_id: str) -> KeyState:
        """An :data:`EPHEMERAL` key's file, opened for this use only, its lock already held.

        Locked here, where it is known to be the file still at its path (a
        sweep may have removed the one opened a moment ago); the caller's
        lock of it is then a lock it holds already, and closing the file
        when the state goes releases it.
        """
        path = os.path.join(self.directory, file_name(key_id))
        while True:
            state = KeyState(path)
            fcntl.flock(state.fd, fcntl.LOCK_EX)
            if os.fstat(state.fd).st_nlink:
                return state
            del state  # swept: closed, and the path opened again

    def _prepare(self, state: KeyState, limits: Limits, now: int) -> None:
        """Make the key's layout fit ``limits``, keeping its history when it can."""
        rate_cap, conc_cap = max(limits.per_minute, 1), max(limits.concurrent, 1)
        if not state.load():
            state.rebuild(rate_cap, conc_cap, keep=False, now=now)
        elif state.ring_at((state.head - 1) % state.layout[0]) > now + 1000:
            # Times from before a reboot: the monotonic clock restarted.
            state.rebuild(rate_cap, conc_cap, keep=False, now=now)
        elif len(state.ring) < rate_cap or len(state.slots) < conc_cap:
            # A ring longer than the limit is kept as it is: it may hold
            # calls still in the window beyond the limit's N, and the
            # checks read the N-th most recent wherever the ring ends.
            state.rebuild(rate_cap, conc_cap, keep=True, now=now)


def _idle(state: KeyState, now: int) -> bool:
    """Whether a key made no call for :data:`IDLE_MS` and holds no slot (its file locked)."""
    if not state.load():
        return True  # nothing in it, or not a layout of ours
    latest = int(state.ring.max())
    if latest > now + 1000:
        return True  # times from before a reboot: the monotonic clock restarted
    if latest and now - latest < IDLE_MS:
        return False
    return not any(
        pid and alive(int(pid), int(expiry), now) for pid, _, expiry in state.slots.tolist()
    )
