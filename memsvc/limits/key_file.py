"""One key's state: a small memory-mapped file, its layout, and its lock.

Shared by every process of the box that maps it; locked with ``flock``
across processes and a ``threading.Lock`` across the threads of one.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
import sys
import threading

import numpy as np

from .contract import WINDOW_MS

_MAGIC = 0x4D454D5356434C4D  # "MEMSVCLM"
# A key's file: a header of four int64 (magic, rate capacity, concurrency
# capacity, ring head), the ring of accepted-call times (int64 ms, 0 = none;
# its capacity is at least the key's limit, more when the limit was lowered
# while more calls than the new limit were in the window),
# then the concurrency slots (pid, token, expiry ms; pid 0 = free). Files
# only ever grow, so a process still mapping an older, shorter layout never
# touches memory beyond the end of the file.
HEADER_WORDS = 4
SLOT_WORDS = 3
# The hot paths read and write single words through a memoryview of the
# mapping (a tenth of numpy's cost per element); it is in the machine's
# order, the file little-endian.
_NATIVE_WORDS = sys.byteorder == "little"


class KeyState:
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
        self.slots: np.ndarray = np.empty((0, SLOT_WORDS), dtype=np.int64)
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
        if size < 8 * HEADER_WORDS:
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
            magic, rate_cap, conc_cap, head = self.words[:HEADER_WORDS].tolist()
        if magic != _MAGIC or rate_cap < 1 or conc_cap < 1 or not 0 <= head < rate_cap:
            return False
        needed = HEADER_WORDS + rate_cap + SLOT_WORDS * conc_cap
        if needed > len(self.words):
            self._map()  # another process grew the file
            if self.words is None or needed > len(self.words):
                return False
        if self.layout != (rate_cap, conc_cap):
            body = self.words[HEADER_WORDS:]
            self.ring = body[:rate_cap]
            self.slots = body[rate_cap : rate_cap + SLOT_WORDS * conc_cap].reshape(
                conc_cap, SLOT_WORDS
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
        return word[HEADER_WORDS + i] if word is not None else int(self.ring[i])

    def rebuild(self, rate_cap: int, conc_cap: int, keep: bool, now: int) -> None:
        """Lay the file out for new capacities, keeping recent history if ``keep``.

        The ring keeps every call still in the window at ``now``, however
        many more than ``rate_cap`` they are: a lowered limit refuses calls
        until enough have left, and one raised again still counts them all.
        """
        times = np.empty(0, dtype=np.int64)
        slots = np.empty((0, SLOT_WORDS), dtype=np.int64)
        if keep:
            times = np.roll(self.ring, -self.head)  # oldest first
            times = times[times != 0].copy()
            slots = self.slots[self.slots[:, 0] != 0].copy()
            in_window = int(np.count_nonzero(now - times < WINDOW_MS))
            rate_cap = max(rate_cap, in_window)
        times = times[-rate_cap:]
        conc_cap = max(conc_cap, len(slots))
        needed = HEADER_WORDS + rate_cap + SLOT_WORDS * conc_cap
        if self.words is None or needed > len(self.words):
            os.ftruncate(self.fd, max(8 * needed, os.fstat(self.fd).st_size))
            self._map()
        words = self.words
        assert words is not None  # just mapped, large enough
        words[HEADER_WORDS:needed] = 0
        words[:HEADER_WORDS] = (_MAGIC, rate_cap, conc_cap, len(times) % rate_cap)
        self.layout = (0, 0)
        self.load()
        self.ring[: len(times)] = times
        self.slots[: len(slots)] = slots


class locked:
    """Hold a key's lock: its thread lock within the process, its flock across."""

    __slots__ = ("state",)

    def __init__(self, state: KeyState):
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


def file_name(key_id: str) -> str:
    return "".join(c for c in key_id if c.isalnum() or c == "-") or "key"
