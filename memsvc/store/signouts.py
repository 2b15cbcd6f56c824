"""Console sessions that were signed out, remembered until they would have ended anyway.

A console session lives in its browser's cookie (encrypted and signed), so
nothing on the server knows of it: a copy of the cookie taken before a
sign-out would go on working after it, and renew itself at each use. A
sign-out therefore records the session's id, for as long as a cookie of it
could still be accepted (the console's idle time: a refused cookie is
never renewed), and every console request asks whether its session ended.

Every process serving the database must see the same records. For SQLite
(the workers of one box) each record is a small file in a private folder
beside the database (:class:`FileSignOuts`); for PostgreSQL (every server
sharing it) a row of a table in it (:class:`memsvc.store.postgres.signouts.PgSignOuts`).
Records are found by a hash of the session id, never the id itself, and
those past their time are removed whenever a session is signed out.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import typing as t

from ..limits import private_directory


class SignOuts(t.Protocol):
    """The sessions signed out, shared by every process serving one database."""

    def end(self, session_id: str, until: float) -> None:
        """Record the session as ended until ``until`` (seconds since the epoch)."""

    def ended(self, session_id: str) -> bool:
        """Whether the session was signed out (and its record has not run out)."""


def record_name(session_id: str) -> str:
    """What a session's record is found by: a hash of its id."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]


class FileSignOuts:
    """One file per signed-out session in a private folder (0700) of the box.

    A record holds the time it runs out; it is written whole (a new file
    renamed into place) so a reader never sees half of one, and a record
    that cannot be read counts as ended.
    """

    def __init__(self, directory: str, clock: t.Callable[[], float] = time.time):
        self.directory = private_directory(directory)
        self.clock = clock

    def end(self, session_id: str, until: float) -> None:
        self.sweep()
        path = os.path.join(self.directory, record_name(session_id))
        temporary = f"{path}.{os.getpid()}.new"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(repr(float(until)))
        os.replace(temporary, path)

    def ended(self, session_id: str) -> bool:
        path = os.path.join(self.directory, record_name(session_id))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # there, but not to be read: the safe answer
        try:
            with os.fdopen(fd, encoding="ascii") as f:
                until = float(f.read(64))
        except (OSError, ValueError):
            return True
        return until > self.clock()

    def sweep(self) -> int:
        """Remove the records past their time; returns how many went."""
        now = self.clock()
        removed = 0
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.endswith(".new"):
                    # Another process's, being written; or left by one that died.
                    with contextlib.suppress(OSError):
                        if entry.stat().st_mtime < now - 3600:
                            os.unlink(entry.path)
                    continue
                try:
                    with open(entry.path, encoding="ascii") as f:
                        until = float(f.read(64))
                except (OSError, ValueError):
                    continue
                if until <= now:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        removed += 1
        return removed
