"""The box's lane for long texts: at most N embedded at once, all worker processes together.

Embedding a long text (hundreds of windows) keeps a core busy for
seconds. Without a bound across processes, each gunicorn worker ran one
(:mod:`.windows` holds a worker to one at a time), and two workers on a
two-core box then took both cores: another tenant's query waited for CPU
behind them whatever its own limits. The lane is ``at_once`` lock files in
a folder of this box; a long text is embedded holding one of them, so
however many calls bring long texts, at most ``at_once`` cores embed them
and the rest of the box answers everything else.

A lock file (``flock``) is held by an open file, not by a process's
memory: a worker that dies mid-embedding frees its place at once. Files
are opened in each process on first use (a descriptor inherited across
``fork`` would share its lock with the parent).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import typing as t

from ..errors import ConfigError
from ..limits.folders import private_directory

#: How often a text waiting for one of several places looks again.
_POLL_SECONDS = 0.01


def default_directory() -> str:
    """This user's lane on this box: tmpfs where the box has one, else the temporary folder."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else "/tmp"
    return os.path.join(base, f"memsvc-lanes-{os.getuid()}")


def lane_file(directory: str, place: int) -> str:
    """The lock file of the lane's ``place``-th place."""
    return os.path.join(directory, f"long-texts-{place}.lock")


class Lane:
    """At most ``at_once`` long texts embedded at once by every process using ``directory``."""

    def __init__(self, directory: str, at_once: int):
        if at_once < 1:
            raise ValueError("a lane has at least one place")
        self.directory = private_directory(directory)
        self.at_once = at_once
        self._pid = -1
        self._fds: list[int] = []
        # One thread of a process waits for the box's lane; the others wait
        # here, behind it (and hold no file).
        self._turn = threading.Lock()

    @contextlib.contextmanager
    def turn(self) -> t.Iterator[None]:
        """Wait for a place in the lane, hold it for the ``with`` block."""
        with self._turn:
            fd = self._take()
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _take(self) -> int:
        fds = self._files()
        if len(fds) == 1:
            fcntl.flock(fds[0], fcntl.LOCK_EX)  # waits without the GIL
            return fds[0]
        while True:
            for fd in fds:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    continue
            time.sleep(_POLL_SECONDS)

    def _files(self) -> list[int]:
        if self._pid != os.getpid():
            # Opened in this process (under self._turn): never a parent's descriptors.
            for fd in self._fds:
                os.close(fd)  # the parent's lock, if it holds one, stays its own
            # Made again if it went since the lane was set up (a cleaned /dev/shm or
            # temporary folder), and checked again as the limiter's folders are.
            private_directory(self.directory)
            self._fds = [
                os.open(lane_file(self.directory, i), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                for i in range(self.at_once)
            ]
            self._pid = os.getpid()
        return self._fds


def long_text_lane(settings: t.Mapping[str, t.Any]) -> Lane:
    """The lane the settings describe: ``MEMSVC_LONG_TEXTS_AT_ONCE`` places in its folder."""
    directory = settings["LIMITS_DIR"] or default_directory()
    at_once = settings["LONG_TEXTS_AT_ONCE"] or max(1, (os.cpu_count() or 1) // 2)
    try:
        return Lane(directory, at_once)
    except OSError as e:
        raise ConfigError(
            f"the lane of long texts cannot be kept in {directory!r}: {e}; remove it, or set "
            "MEMSVC_LIMITS_DIR to a private folder"
        ) from None
