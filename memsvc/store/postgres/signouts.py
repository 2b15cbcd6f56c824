"""Console sessions signed out, in the database every server shares (see :mod:`..signouts`).

One row per signed-out session, by a hash of its id, with the time it runs
out; rows past it are deleted whenever a session is signed out. The table
is made by the first sign-out (until then no session was signed out, and
every lookup finds none), so the schema's version does not change for it.
It is an ordinary, logged table: a sign-out outlives a crash of the server.
"""

from __future__ import annotations

import contextlib
import time
import typing as t

import psycopg
from psycopg import errors as pg_errors

from ..signouts import record_name

Connect = t.Callable[[], contextlib.AbstractContextManager[psycopg.Connection[t.Any]]]

_TABLE = """
    CREATE TABLE IF NOT EXISTS memsvc_console_signouts (
        record text PRIMARY KEY,
        until_s double precision NOT NULL
    )
"""
_END = (
    "INSERT INTO memsvc_console_signouts (record, until_s) VALUES (%s, %s) "
    "ON CONFLICT (record) DO UPDATE "
    "SET until_s = greatest(memsvc_console_signouts.until_s, excluded.until_s)"
)
_SWEEP = "DELETE FROM memsvc_console_signouts WHERE until_s <= %s"
_ENDED = "SELECT until_s FROM memsvc_console_signouts WHERE record = %s"


class PgSignOuts:
    """:class:`memsvc.store.signouts.SignOuts` for every server of one PostgreSQL database.

    ``connect`` gives a connection for one short piece of work (a pool's),
    not inside a transaction; each statement commits before this returns.
    """

    def __init__(self, connect: Connect, clock: t.Callable[[], float] = time.time):
        self._connect = connect
        self.clock = clock
        self._made = False

    def end(self, session_id: str, until: float) -> None:
        with self._connect() as conn, _autocommit(conn):
            if not self._made:
                with conn.transaction():
                    # Two servers making it at once would race on the catalogs.
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended('memsvc-signouts', 0))"
                    )
                    conn.execute(_TABLE)
                self._made = True
            conn.execute(_SWEEP, [self.clock()])
            conn.execute(_END, [record_name(session_id), float(until)])

    def ended(self, session_id: str) -> bool:
        with self._connect() as conn, _autocommit(conn):
            try:
                row = conn.execute(_ENDED, [record_name(session_id)]).fetchone()
            except pg_errors.UndefinedTable:
                return False  # no session was ever signed out here
        return row is not None and float(row[0]) > self.clock()


@contextlib.contextmanager
def _autocommit(conn: psycopg.Connection[t.Any]) -> t.Iterator[None]:
    """Each statement its own transaction, committed at once; the connection's mode restored."""
    was = conn.autocommit
    conn.autocommit = True
    try:
        yield
    finally:
        with contextlib.suppress(psycopg.Error):  # a broken connection: the pool drops it
            conn.autocommit = was
