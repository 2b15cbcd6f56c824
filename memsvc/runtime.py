"""What one memsvc process holds: its database, embedder, limiter, search cache, token verifier.

The app (:func:`memsvc.create_app`) and the ``memsvc`` command build one
:class:`Runtime` each from the checked settings; services get its parts as
arguments, so nothing below the API layer knows about Flask.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import typing as t

from .embeddings import Embedder
from .embeddings import make_embedder
from .embeddings.cache import CachedEmbedder
from .errors import ConfigError
from .limits import Limiter
from .limits import Limits
from .limits import default_directory
from .search.cache import SearchCache
from .store import Database
from .store import SqliteStore
from .store import Store
from .store import StoreMismatch
from .store import is_postgres
from .tokens import TokenVerifier
from .tokens import make_verifier

log = logging.getLogger(__name__)


class DatabaseInUse(Exception):
    """A running memsvc server holds the database."""


class Runtime:
    def __init__(self, settings: t.Mapping[str, t.Any], instance_path: str):
        self.settings = settings
        self.instance_path = instance_path
        self.postgres = is_postgres(settings["DATABASE"])
        self.db: t.Any
        if self.postgres:
            from .store.postgres import PgDatabase

            # A connection per thread at most, and a few for the limiter and
            # the maintenance thread.
            self.db = PgDatabase(settings["DATABASE"], max_size=settings["THREADS"] + 4)
        else:
            self.db = Database(
                settings["DATABASE"],
                busy_timeout_ms=settings["SQLITE_BUSY_TIMEOUT_MS"],
                synchronous=settings["SQLITE_SYNCHRONOUS"],
                mmap_mb=settings["SQLITE_MMAP_MB"],
            )
        # Cheap to make: a local model's weights load on its first use, in
        # the worker process, never in gunicorn's master before the fork.
        self.embedder: Embedder = make_embedder(settings, instance_path)
        self._query_cache: CachedEmbedder | None = None
        self._limiter: t.Any = None
        self.default_limits = Limits(
            settings["RATE_LIMIT_PER_MINUTE"], settings["CONCURRENCY_LIMIT"]
        )
        cache_bytes = settings["SEARCH_CACHE_MB"] * 1024 * 1024
        self.search_cache = (
            SearchCache(cache_bytes, self.embedder.dimensions) if cache_bytes else None
        )
        #: Verifies bearer tokens for the keys router; None if not configured.
        self.tokens: TokenVerifier | None = make_verifier(settings, instance_path)
        self._serving_lock: int | None = None
        self._maintenance: t.Any = None
        #: (time.monotonic(), what) of the last call storage failed, if recent.
        self.storage_failure: tuple[float, str] | None = None

    @property
    def limiter(self) -> Limiter:
        """The per-key limiter; its folder is named after the database, so it exists first.

        With PostgreSQL its state is in the database, shared by every server.
        """
        if self._limiter is None and self.postgres:
            from .store.postgres.limits import PgLimiter

            self._limiter = PgLimiter(self.db.pooled)
        if self._limiter is None:
            directory = self.settings["LIMITS_DIR"] or default_directory(
                self.settings["DATABASE"], self.instance_path
            )
            try:
                self._limiter = Limiter(directory)
            except OSError as e:
                raise ConfigError(
                    f"MEMSVC_LIMITS_DIR {directory!r} cannot be used: {e}; remove it, or set "
                    "MEMSVC_LIMITS_DIR to a private folder"
                ) from None
        return self._limiter

    def query_embedder(self, tenant: str) -> Embedder:
        """For a tenant's search queries: the embedder, remembering their recent queries.

        Each tenant has entries of its own: a query another tenant asked is
        as slow as a new one.
        """
        entries = self.settings["QUERY_CACHE_ENTRIES"]
        if not entries:
            return self.embedder
        cache = self._query_cache
        if cache is None or cache.embedder is not self.embedder:
            cache = self._query_cache = CachedEmbedder(self.embedder, entries)
        return cache.scoped(tenant)

    def start_maintenance(self) -> None:
        """Start this process's maintenance thread (see :mod:`memsvc.maintenance`), once."""
        if self._maintenance is None or not self._maintenance.is_alive():
            from .maintenance import Maintenance

            self._maintenance = Maintenance(self, self.settings["MAINTENANCE_SECONDS"])
            self._maintenance.start()

    def storage_failed(self, problem: str) -> None:
        self.storage_failure = (time.monotonic(), problem)
        # The other workers' /health must know too: a probe that writes
        # nothing durable can pass on a full disk. The limiter's private
        # folder is shared by the workers of this database (on tmpfs where
        # there is one); PostgreSQL's servers each find out for themselves.
        path = self._trouble_file()
        if path is None:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"{time.monotonic()}\n{problem}")
        except OSError:
            pass  # this process still knows

    def storage_trouble(self, within: float = 30.0) -> str | None:
        """What failed in storage in the last ``within`` seconds, in any worker, if anything."""
        failures = [self.storage_failure] if self.storage_failure else []
        path = self._trouble_file()
        if path is not None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, encoding="utf-8") as f:
                    when, problem = f.read(4096).split("\n", 1)
                failures.append((float(when), problem))
            except (OSError, ValueError):
                pass  # none recorded, or not readable: this process's own knowledge
        if not failures:
            return None
        when_, latest = max(failures)
        return latest if time.monotonic() - when_ <= within else None

    def storage_recovered(self) -> None:
        """A write went through: storage works again, for every worker's /health."""
        path = self._trouble_file()
        if self.storage_failure is None and (path is None or not os.path.exists(path)):
            return
        self.storage_failure = None
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _trouble_file(self) -> str | None:
        if self.postgres:
            return None
        return os.path.join(self.limiter.directory, "storage-trouble")

    def store(self) -> Store:
        """A store on this thread's connection (until :meth:`release`)."""
        if self.postgres:
            from .store.postgres import PgStore

            return PgStore(self.db.connection())
        return SqliteStore(self.db.connection())

    def release(self) -> None:
        """This thread is done with its store for now (the end of a request)."""
        self.db.release()

    def prepare(self, *, check_embedder: bool) -> None:
        """Create or migrate the database; refuse one made for another model.

        :param check_embedder: only maintenance commands such as ``memsvc
            reembed`` work on a database whose vectors come from another model.
        """
        path = self.settings["DATABASE"]
        if self.postgres:
            from .store.postgres.connection import database_name

            shown = f"(PostgreSQL {database_name(path)})"
        else:
            shown = repr(path)
        try:
            if not self.postgres:
                self._prepare_file(path)
            prepare_model = getattr(self.embedder, "prepare", None)
            if prepare_model is not None:
                prepare_model()
            store = self.store()
            store.migrate(self.embedder.model_id, self.embedder.dimensions)
            if check_embedder:
                store.check_embedder(self.embedder.model_id, self.embedder.dimensions)
        except ConfigError:
            raise
        except StoreMismatch as e:
            raise ConfigError(str(e)) from None
        except Exception as e:
            raise ConfigError(f"MEMSVC_DATABASE {shown} cannot be used: {e}") from None
        finally:
            self.db.release()
            # No connection (and no pool thread) may cross gunicorn's fork into the workers.
            self.db.close()

    def _prepare_file(self, path: str) -> None:
        """The SQLite file's folder exists, the file is private, the limits folder is ours."""
        default_folder = os.path.join(self.instance_path, "")
        if os.path.abspath(path).startswith(os.path.abspath(default_folder)):
            # The instance folder holds the database and the token secret.
            os.makedirs(self.instance_path, mode=0o700, exist_ok=True)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            problem = "is not a folder" if os.path.exists(folder) else "does not exist"
            raise ConfigError(f"MEMSVC_DATABASE {path!r} cannot be used: {folder} {problem}")
        create_private(path)
        # A planted or shared limits folder stops start-up here, not a request.
        log.debug("limits in %s", self.limiter.directory)

    # -- who uses the database ---------------------------------------------------------

    def hold_for_serving(self) -> None:
        """Mark the database as served by this process (and its forked workers).

        A shared lock on a file beside the database, held until the process
        ends: maintenance that must not run under a live server (``memsvc
        reembed``) asks for it exclusively and is refused.
        """
        if self.postgres:
            # Servers are told apart in pg_stat_activity (see exclusive()).
            from .store.postgres.connection import SERVER_APPLICATION

            self.db.application = SERVER_APPLICATION
            return
        fd = os.open(_lock_path(self.settings["DATABASE"]), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._serving_lock = fd

    def exclusive(self) -> None:
        """Take the database for maintenance, or :class:`DatabaseInUse` if a server holds it."""
        if self.postgres:
            from .store.postgres.connection import database_name
            from .store.postgres.connection import servers_connected

            if servers_connected(self.db):
                raise DatabaseInUse(
                    f"a memsvc server is using the PostgreSQL "
                    f"{database_name(self.settings['DATABASE'])}; stop it first (every "
                    "server using it)"
                )
            return
        fd = os.open(_lock_path(self.settings["DATABASE"]), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DatabaseInUse(
                f"a memsvc server is using {self.settings['DATABASE']}; stop it first"
            ) from None
        self._serving_lock = fd

    def close(self) -> None:
        """Stop maintenance, close every connection and let go of the database."""
        if self._maintenance is not None:
            self._maintenance.stop()
            self._maintenance.join(10)
        self.db.close()
        if self._serving_lock is not None:
            os.close(self._serving_lock)
            self._serving_lock = None


def _lock_path(database: str) -> str:
    return database + ".serving.lock"


def create_private(path: str) -> None:
    """Create ``path`` readable by its owner only, unless it exists.

    SQLite creates a missing database with the umask's permissions (often
    world-readable) and gives its -wal and -shm files the database's; made
    0600 here, all three stay private.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
