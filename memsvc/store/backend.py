"""A deployment's database, whole: one :class:`Backend` per kind of store.

A backend owns what memsvc keeps about its database beyond the store's
methods: the connections (one per thread, made on first use, so none
crosses gunicorn's fork), the per-key limiter that goes with that kind of
deployment, the console sessions signed out (:mod:`.signouts`), getting the
database ready to serve (:meth:`Backend.prepare`),
the locks that tell a running server from maintenance, and what failed in
storage lately (:class:`StorageFailures`, for ``/health``).
:func:`memsvc.store.open_backend` makes the one ``MEMSVC_DATABASE`` names.
"""

from __future__ import annotations

import abc
import contextlib
import os
import time
import typing as t

from ..errors import ConfigError
from ..limits import KeyLimiter
from . import schema
from .base import FullStore
from .schema import StoreMismatch
from .signouts import SignOuts


class DatabaseInUse(Exception):
    """A running memsvc server holds the database."""


class BackupError(Exception):
    """The copy could not be made; nothing was left at the destination."""


class BackupRefused(Exception):
    """``memsvc backup`` does not copy this kind of database; the message says what does."""


class StorageFailures:
    """What failed in storage lately: in this process, and in every process sharing a file.

    A probe that writes nothing durable can pass on a full disk, so a
    worker's ``/health`` must also know what failed in the others'
    calls: with ``path``, a failure is written to that file (in a folder
    private to the database's workers) and read back by all of them.
    """

    def __init__(self, path: t.Callable[[], str] | None = None):
        self._path = path
        #: (time.monotonic(), what) of the last call storage failed in this process, if any.
        self.last: tuple[float, str] | None = None

    def failed(self, problem: str) -> None:
        self.last = (time.monotonic(), problem)
        if self._path is None:
            return
        try:
            fd = os.open(self._path(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"{self.last[0]}\n{problem}")
        except OSError:
            pass  # this process still knows

    def recent(self, within: float = 30.0) -> str | None:
        """What failed in the last ``within`` seconds, in any process, if anything."""
        failures = [self.last] if self.last else []
        if self._path is not None:
            try:
                fd = os.open(self._path(), os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, encoding="utf-8") as f:
                    when, problem = f.read(4096).split("\n", 1)
                failures.append((float(when), problem))
            except (OSError, ValueError):
                pass  # none recorded, or not readable: this process's own knowledge
        if not failures:
            return None
        when_, latest = max(failures)
        return latest if time.monotonic() - when_ <= within else None

    def recovered(self) -> None:
        """A write went through: storage works again, for every process."""
        path = self._path() if self._path is not None else None
        if self.last is None and (path is None or not os.path.exists(path)):
            return
        self.last = None
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


class Connections(t.Protocol):
    """A backend's connections, one per thread (each store's ``connection`` module)."""

    def release(self) -> None: ...

    def discard(self) -> None: ...

    def close(self) -> None: ...


class Backend(abc.ABC):
    """One database of one kind (SQLite or PostgreSQL) and everything that goes with it."""

    #: "SQLite" or "PostgreSQL", for messages.
    kind: t.ClassVar[str]
    #: What failed in storage lately (see :class:`StorageFailures`).
    failures: StorageFailures
    #: Its connections.
    db: Connections

    @property
    @abc.abstractmethod
    def shown(self) -> str:
        """The database as messages name it (never with its password)."""

    @property
    @abc.abstractmethod
    def limiter(self) -> KeyLimiter:
        """The per-key limiter of this kind of deployment, made on first use."""

    @property
    @abc.abstractmethod
    def signouts(self) -> SignOuts:
        """The console sessions signed out, seen by every process serving this database."""

    # -- connections -----------------------------------------------------------------

    @abc.abstractmethod
    def store(self) -> FullStore:
        """A store on this thread's connection (until :meth:`release`)."""

    def release(self) -> None:
        """This thread is done with its store for now (the end of a request)."""
        self.db.release()

    def discard(self) -> None:
        """Close this thread's connection (it failed); the next store gets a new one."""
        self.db.discard()

    def disconnect(self) -> None:
        """Close every connection; only while no request is using one. They reopen on use."""
        self.db.close()

    def close(self) -> None:
        """Close every connection and let go of the database (see :meth:`hold_for_serving`)."""
        self.disconnect()

    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether the database is there already (else :meth:`prepare` creates it)."""

    @abc.abstractmethod
    def remove(self) -> None:
        """After :meth:`close`: delete a database memsvc created, and what was made for it."""

    # -- getting ready, and who uses the database --------------------------------------

    def prepare(
        self,
        embedder_id: str,
        dimensions: int,
        *,
        check_embedder: bool,
        prepare_model: t.Callable[[], None] | None = None,
    ) -> None:
        """Create or migrate the database and check that it can be served; ConfigError if not.

        The schema must be whole (:meth:`Store.check_schema`: a restore
        that failed half-way records the current version all the same); with
        ``check_embedder``, the stored vectors must come from this model
        (only maintenance such as ``memsvc reembed`` works on another's).
        ``prepare_model`` (converting a local model's weights) runs once
        the database's place is known to be usable, before the schema is
        touched. No connection is left open: none may cross a fork.
        """
        try:
            self._make_room()
            if prepare_model is not None:
                prepare_model()
            store = self.store()
            store.migrate(embedder_id, dimensions)
            store.check_schema()
            if check_embedder:
                schema.check_recorded(store.embedder(), embedder_id, dimensions)
        except ConfigError:
            raise
        except StoreMismatch as e:
            raise ConfigError(str(e)) from None
        except Exception as e:
            raise ConfigError(f"MEMSVC_DATABASE {self.shown} cannot be used: {e}") from None
        finally:
            self.release()
            self.disconnect()

    def _make_room(self) -> None:
        """What the database needs around it before its schema (SQLite: its folder and file)."""
        return None

    @abc.abstractmethod
    def hold_for_serving(self) -> None:
        """Mark the database as served by this process (and its forked workers)."""

    @abc.abstractmethod
    def exclusive(self) -> None:
        """Take the database for maintenance, or :class:`DatabaseInUse` if a server holds it."""

    @abc.abstractmethod
    def backup(self, path: str, *, replace: bool = False) -> dict[str, int]:
        """Copy the database to ``path``: counts of memories and API keys, and bytes.

        :class:`BackupRefused` if this kind is copied with other tools;
        :class:`FileExistsError` if ``path`` exists and not ``replace``.
        """
