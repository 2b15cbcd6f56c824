"""A PostgreSQL deployment: several servers on one database, their limits in it too."""

from __future__ import annotations

from ..backend import Backend
from ..backend import BackupRefused
from ..backend import DatabaseInUse
from ..backend import StorageFailures
from .connection import SERVER_APPLICATION
from .connection import PgDatabase
from .connection import database_name
from .connection import servers_connected
from .limits import PgLimiter
from .signouts import PgSignOuts
from .store import PgStore


class PostgresBackend(Backend):
    """A PostgreSQL database: a pool per process, the limiter's tables, servers by name."""

    kind = "PostgreSQL"
    db: PgDatabase

    def __init__(self, url: str, *, max_size: int):
        self.url = url
        self.db = PgDatabase(url, max_size=max_size)
        self._limiter: PgLimiter | None = None
        self._signouts: PgSignOuts | None = None
        # Each server finds out for itself: they share no folder.
        self.failures = StorageFailures()

    @property
    def shown(self) -> str:
        return f"(PostgreSQL {database_name(self.url)})"

    @property
    def limiter(self) -> PgLimiter:
        """The per-key limits, in the database: counted once for every server."""
        if self._limiter is None:
            self._limiter = PgLimiter(self.db.pooled)
        return self._limiter

    @property
    def signouts(self) -> PgSignOuts:
        """Signed-out console sessions, in the database: seen by every server."""
        if self._signouts is None:
            self._signouts = PgSignOuts(self.db.pooled)
        return self._signouts

    # -- connections -----------------------------------------------------------------

    def store(self) -> PgStore:
        return PgStore(self.db.connection())

    def exists(self) -> bool:
        # memsvc never creates a PostgreSQL database: its operator does.
        return True

    def remove(self) -> None:
        return None  # the database is its operator's

    # -- who uses the database ---------------------------------------------------------

    def hold_for_serving(self) -> None:
        # Servers are told apart in pg_stat_activity (see exclusive()); the
        # pool, made anew after prepare(), connects under that name.
        self.db.application = SERVER_APPLICATION

    def exclusive(self) -> None:
        if servers_connected(self.db):
            raise DatabaseInUse(
                f"a memsvc server is using the PostgreSQL {database_name(self.url)}; stop it "
                "first (every server using it)"
            )

    def backup(self, path: str, *, replace: bool = False) -> dict[str, int]:
        raise BackupRefused(
            "memsvc backup copies a SQLite database; back up PostgreSQL with pg_dump "
            "(see docs/operations.md)"
        )
