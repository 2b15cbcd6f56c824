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

import collections
import dataclasses
import fcntl
import itertools
import math
import mmap
import os
import stat
import sys
import threading
import time
import typing as t
import weakref

import numpy as np

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

_MAGIC = 0x4D454D5356434C4D  # "MEMSVCLM"
# A key's file: a header of four int64 (magic, rate capacity, concurrency
# capacity, ring head), the ring of accepted-call times (int64 ms, 0 = none;
# its capacity is at least the key's limit, more when the limit was lowered
# while more calls than the new limit were in the window),
# then the concurrency slots (pid, token, expiry ms; pid 0 = free). Files
# only ever grow, so a process still mapping an older, shorter layout never
# touches memory beyond the end of the file.
_HEADER_WORDS = 4
_SLOT_WORDS = 3
# The hot paths read and write single words through a memoryview of the
# mapping (a tenth of numpy's cost per element); it is in the machine's
# order, the file little-endian.
_NATIVE_WORDS = sys.byteorder == "little"


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


class _KeyState:
    """One key's file, mapped as numpy arrays, and the lock for this process's threads."""

    def __init__(self, path: str, *, create: bool = True):
        self.lock = threading.Lock()
        # Never through a symbolic link, and only a file of ours: the folder
        # is private, but a file planted before it was made private is not.
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        self.fd = os.open(path, flags, 0o600)
        info = os.fstat(self.fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            os.close(self.fd)
            raise PermissionError(f"{path} is not a file of this user's: refusing to use it")
        self.words: np.ndarray | None = None  # the whole file as int64
        #: The same words, one at a time (None on a big-endian machine).
        self.word: memoryview | None = None
        self.ring: np.ndarray = np.empty(0, dtype=np.int64)
        self.slots: np.ndarray = np.empty((0, _SLOT_WORDS), dtype=np.int64)
        self.layout = (0, 0)
        #: Where this process looks for a free slot first: the one it took last.
        self.hint = 0

    def __del__(self) -> None:
        # The arrays keep the mapping alive until they go; then it is unmapped.
        fd = getattr(self, "fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except (OSError, TypeError, AttributeError):
                pass  # already closed, or the interpreter is shutting down

    def _map(self) -> None:
        size = os.fstat(self.fd).st_size // 8 * 8
        if size < 8 * _HEADER_WORDS:
            self.words = None
            return
        mapped = mmap.mmap(self.fd, size)
        self.words = np.frombuffer(mapped, dtype="<i8")
        self.word = memoryview(mapped).cast("q") if _NATIVE_WORDS else None
        self.layout = (0, 0)

    def load(self) -> bool:
        """Map the file's current layout; False if it has none yet (or a broken one)."""
        if self.words is None:
            self._map()
            if self.words is None:
                return False
        assert self.words is not None
        word = self.word
        if word is not None:
            magic, rate_cap, conc_cap, head = word[0], word[1], word[2], word[3]
        else:
            magic, rate_cap, conc_cap, head = self.words[:_HEADER_WORDS].tolist()
        if magic != _MAGIC or rate_cap < 1 or conc_cap < 1 or not 0 <= head < rate_cap:
            return False
        needed = _HEADER_WORDS + rate_cap + _SLOT_WORDS * conc_cap
        if needed > len(self.words):
            self._map()  # another process grew the file
            if self.words is None or needed > len(self.words):
                return False
        if self.layout != (rate_cap, conc_cap):
            body = self.words[_HEADER_WORDS:]
            self.ring = body[:rate_cap]
            self.slots = body[rate_cap : rate_cap + _SLOT_WORDS * conc_cap].reshape(
                conc_cap, _SLOT_WORDS
            )
            self.layout = (rate_cap, conc_cap)
        return True

    @property
    def head(self) -> int:
        assert self.words is not None  # only read after load()
        return self.word[3] if self.word is not None else int(self.words[3])

    @head.setter
    def head(self, value: int) -> None:
        assert self.words is not None
        self.words[3] = value

    def ring_at(self, i: int) -> int:
        """The ``i``-th time of the ring (after :meth:`load`)."""
        word = self.word
        return word[_HEADER_WORDS + i] if word is not None else int(self.ring[i])

    def rebuild(self, rate_cap: int, conc_cap: int, keep: bool, now: int) -> None:
        """Lay the file out for new capacities, keeping recent history if ``keep``.

        The ring keeps every call still in the window at ``now``, however
        many more than ``rate_cap`` they are: a lowered limit refuses calls
        until enough have left, and one raised again still counts them all.
        """
        times = np.empty(0, dtype=np.int64)
        slots = np.empty((0, _SLOT_WORDS), dtype=np.int64)
        if keep:
            times = np.roll(self.ring, -self.head)  # oldest first
            times = times[times != 0].copy()
            slots = self.slots[self.slots[:, 0] != 0].copy()
            in_window = int(np.count_nonzero(now - times < WINDOW_MS))
            rate_cap = max(rate_cap, in_window)
        times = times[-rate_cap:]
        conc_cap = max(conc_cap, len(slots))
        needed = _HEADER_WORDS + rate_cap + _SLOT_WORDS * conc_cap
        if self.words is None or needed > len(self.words):
            os.ftruncate(self.fd, max(8 * needed, os.fstat(self.fd).st_size))
            self._map()
        words = self.words
        assert words is not None  # just mapped, large enough
        words[_HEADER_WORDS:needed] = 0
        words[:_HEADER_WORDS] = (_MAGIC, rate_cap, conc_cap, len(times) % rate_cap)
        self.layout = (0, 0)
        self.load()
        self.ring[: len(times)] = times
        self.slots[: len(slots)] = slots


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
        self._states: collections.OrderedDict[str, _KeyState] = collections.OrderedDict()
        self._states_lock = threading.Lock()

    def acquire(self, key_id: str, limits: Limits) -> tuple[int, int] | None:
        """Admit one call or raise :class:`Refused`; returns the token to :meth:`release`."""
        if not limits.per_minute and not limits.concurrent:
            return None
        state = self._state(key_id)
        with _locked(state):
            now = self.clock()
            self._prepare(state, limits, now)
            if limits.per_minute:
                _check_rate(state, limits, 1, 1, now)
            slot = None
            if limits.concurrent:
                slot = _free_slot(state, now, limits.concurrent)
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
                    word[_HEADER_WORDS + head] = now
                    word[3] = (head + 1) % size
                else:
                    state.ring[head] = now
                    state.head = (head + 1) % size
            if slot is None:
                return None
            token = next(self._tokens)
            if word is not None:
                at = _HEADER_WORDS + state.layout[0] + _SLOT_WORDS * slot
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
        with _locked(state):
            now = self.clock()
            self._prepare(state, limits, now)
            _check_rate(state, limits, units, units + 1, now)
            head, size = state.head, len(state.ring)
            state.ring[(head + np.arange(units)) % size] = now
            state.head = (head + units) % size

    def release(self, key_id: str, held: tuple[int, int] | None) -> None:
        """Free the concurrency slot a call held."""
        if held is None:
            return
        slot, token = held
        state = self._state(key_id)
        with _locked(state):
            if not state.load():
                return
            pid = self._pid
            word = state.word
            if word is not None and slot < state.layout[1]:
                at = _HEADER_WORDS + state.layout[0] + _SLOT_WORDS * slot
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
        with _locked(state):
            if not state.load():
                return 0
            now = self.clock()
            return sum(_alive(int(pid), int(exp), now) for pid, _, exp in state.slots if pid)

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
                state = _KeyState(path, create=False)
            except OSError:
                continue  # removed meanwhile, or not a file of ours
            with _locked(state):
                if os.fstat(state.fd).st_nlink and _idle(state, now):
                    os.unlink(path)
                    removed += 1
        return removed

    # -- internals -----------------------------------------------------------------

    def _state(self, key_id: str) -> _KeyState:
        state = self._states.get(key_id)
        if state is not None:
            return state
        if key_id.startswith(EPHEMERAL):
            return self._ephemeral(key_id)
        with self._states_lock:
            state = self._states.get(key_id)
            if state is None:
                state = _KeyState(os.path.join(self.directory, _file_name(key_id)))
                self._states[key_id] = state
                # Forget the oldest; a thread still using one keeps it open
                # until it is done.
                while len(self._states) > self.max_open:
                    self._states.popitem(last=False)
            return state

    def _ephemeral(self, key_id: str) -> _KeyState:
        """An :data:`EPHEMERAL` key's file, opened for this use only, its lock already held.

        Locked here, where it is known to be the file still at its path (a
        sweep may have removed the one opened a moment ago); the caller's
        lock of it is then a lock it holds already, and closing the file
        when the state goes releases it.
        """
        path = os.path.join(self.directory, _file_name(key_id))
        while True:
            state = _KeyState(path)
            fcntl.flock(state.fd, fcntl.LOCK_EX)
            if os.fstat(state.fd).st_nlink:
                return state
            del state  # swept: closed, and the path opened again

    def _prepare(self, state: _KeyState, limits: Limits, now: int) -> None:
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


def check_units(units: int, limits: Limits) -> None:
    """A charge of ``units`` more must leave room for the call's first unit in the limit."""
    if units + 1 > limits.per_minute:
        raise ValueError(
            f"a call of {units + 1} units can never fit in a limit of {limits.per_minute} a minute"
        )


def _check_rate(state: _KeyState, limits: Limits, units: int, retry_units: int, now: int) -> None:
    """Raise :class:`Refused` unless ``units`` more calls fit in the key's window.

    The ring holds the times of the key's last calls (at least N of them),
    oldest first from its head, so its ``k``-th most recent is at ``head -
    k``: ``units`` more fit when the ``(N - units + 1)``-th most recent has
    left the window (or was never made). ``retry_after`` says when
    ``retry_units`` more would fit. Recording them then overwrites the
    oldest entries, which are older still: nothing in the window is lost.
    """
    head, size, n = state.head, state.layout[0], limits.per_minute
    if not _in_window(state.ring_at((head - n + units - 1) % size), now):
        return
    leaves = state.ring_at((head - n + retry_units - 1) % size) + WINDOW_MS
    raise Refused(
        f"Rate limit exceeded: {limits.per_minute} requests per minute",
        max(1, math.ceil((leaves - now) / 1000)),
    )


def _idle(state: _KeyState, now: int) -> bool:
    """Whether a key made no call for :data:`IDLE_MS` and holds no slot (its file locked)."""
    if not state.load():
        return True  # nothing in it, or not a layout of ours
    latest = int(state.ring.max())
    if latest > now + 1000:
        return True  # times from before a reboot: the monotonic clock restarted
    if latest and now - latest < IDLE_MS:
        return False
    return not any(
        pid and _alive(int(pid), int(expiry), now) for pid, _, expiry in state.slots.tolist()
    )


def _in_window(at: int, now: int) -> bool:
    return at != 0 and now - at < WINDOW_MS


class _locked:
    """Hold a key's lock: its thread lock within the process, its flock across."""

    __slots__ = ("state",)

    def __init__(self, state: _KeyState):
        self.state = state

    def __enter__(self) -> None:
        self.state.lock.acquire()
        try:
            fcntl.flock(self.state.fd, fcntl.LOCK_EX)
        except BaseException:
            self.state.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self.state.fd, fcntl.LOCK_UN)
        finally:
            self.state.lock.release()


#: Slots :func:`_free_slot` tries one by one before counting them all.
_PROBES = 4


def _free_slot(state: _KeyState, now: int, limit: int) -> int | None:
    """A free slot's index if fewer than ``limit`` are held, else None.

    With as many slots as the limit (unless it was lowered while more calls
    held one), any free slot means fewer than ``limit`` are held: a few are
    tried, starting where this process last took one, before all are counted.
    """
    word = state.word
    rate_cap, conc_cap = state.layout
    if word is not None and conc_cap == limit:
        base = _HEADER_WORDS + rate_cap
        for probe in range(min(_PROBES, conc_cap)):
            i = (state.hint + probe) % conc_cap
            at = base + _SLOT_WORDS * i
            if word[at] == 0 or now >= word[at + 2]:
                return i
    return _count_slots(state.slots, now, limit)


def _count_slots(slots: np.ndarray, now: int, limit: int) -> int | None:
    """:func:`_free_slot` by counting every slot held."""
    if len(slots) <= 64:
        # Plain Python beats numpy's per-call overhead on a few rows.
        rows = slots.tolist()
        held = [pid != 0 and now < expiry for pid, _, expiry in rows]
        count = sum(held)
        if count >= limit:
            # Before refusing, drop the slots of processes that no longer exist.
            for i, is_held in enumerate(held):
                pid, _, expiry = rows[i]
                if is_held and not _alive(pid, expiry, now):
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
            if not _alive(pid, expiry, now):
                slots[i] = 0
                mask[i] = False
                count -= 1
        if count >= limit:
            return None
    free = int(np.argmin(mask))
    return None if mask[free] else free


def _alive(pid: int, expiry: int, now: int) -> bool:
    if now >= expiry:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _file_name(key_id: str) -> str:
    return "".join(c for c in key_id if c.isalnum() or c == "-") or "key"


def private_directory(path: str, uid: int | None = None) -> str:
    """Create ``path`` (mode 0700) or check that it is this user's and no one else's.

    The limiter's files decide who is admitted, so a folder another local
    user made first (a predictable name under /dev/shm), or one others can
    write, or a symbolic link, is refused rather than used.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{path} is not a folder (a symbolic link?)")
    if info.st_uid != (os.getuid() if uid is None else uid):
        raise PermissionError(f"{path} belongs to another user")
    if info.st_mode & 0o077:
        raise PermissionError(f"{path} can be used by other users (mode {info.st_mode & 0o777:o})")
    return path


def default_directory(database: str, instance_path: str) -> str:
    """Where limiter state lives: tmpfs if the box has one, else the instance folder.

    One folder per database file, named after its identity (device and
    inode), not its path: the same database reached by two paths (a
    symbolic link) shares one set of limits. The user id keeps two users'
    deployments apart.
    """
    info = os.stat(database)
    tag = f"{os.getuid()}-{info.st_dev:x}-{info.st_ino:x}"
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return os.path.join(shm, f"memsvc-limits-{tag}")
    return os.path.join(instance_path, f"limits-{tag}")
