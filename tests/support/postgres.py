"""A private PostgreSQL for the tests, and fresh databases on it.

:func:`server` starts one PostgreSQL per test process (the ``pgserver``
package's own build, pgvector included), listening only on a unix socket
in a new temporary folder (on tmpfs if the box has one), with no disk
flushes (fsync off: its data is thrown away); it is stopped, and its
folder removed, when the interpreter exits. Each test then makes its own
database with :func:`fresh_database` (10-30 ms on tmpfs) and drops it
with :func:`drop_database`.

If PostgreSQL cannot start, :class:`PostgresUnavailable` says why: tests
that need it fail, they are never skipped.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
import typing as t
import uuid
import warnings

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

if t.TYPE_CHECKING:
    from pgserver import PostgresServer


class PostgresUnavailable(RuntimeError):
    """The tests' PostgreSQL could not be started."""


_lock = threading.Lock()
_server: PostgresServer | None = None
_failure: PostgresUnavailable | None = None


def server() -> PostgresServer:
    """This process's PostgreSQL, started on first use; ``.get_uri()`` is its base URL."""
    global _server, _failure
    with _lock:
        if _server is None:
            if _failure is not None:
                raise PostgresUnavailable(str(_failure))  # not again for every test
            try:
                _server = _start()
            except PostgresUnavailable as e:
                _failure = e
                raise
        return _server


def _start() -> PostgresServer:
    # On tmpfs where there is one: making a database copies its template's
    # 7.5 MB, several times faster in memory than through a busy disk.
    shm = "/dev/shm"
    parent = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    pgdata = tempfile.mkdtemp(prefix="memsvc-pg-", dir=parent)
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (pgserver keeps
            # a lock file there) and falls back to /tmp: harmless here.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import pgserver

            started = pgserver.get_server(pgdata, cleanup_mode="stop")
    except ImportError as e:
        shutil.rmtree(pgdata, ignore_errors=True)
        raise PostgresUnavailable(
            f"PostgreSQL for the tests could not start: the pgserver package is missing ({e})"
        ) from e
    except Exception as e:
        log = _tail(os.path.join(pgdata, "log"))
        _stop(None, pgdata, os.getpid())
        raise PostgresUnavailable(
            f"PostgreSQL for the tests could not start in {pgdata}: "
            f"{type(e).__name__}: {e}" + (f"\n--- its log ends:\n{log}" if log else "")
        ) from e
    atexit.register(_stop, started, pgdata, os.getpid())
    try:
        with psycopg.connect(started.get_uri(), autocommit=True) as conn:
            # Throwaway data: no waiting for the disk (databases are made
            # and dropped by the hundred).
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
            conn.execute("SELECT pg_reload_conf()")
    except psycopg.Error as e:
        raise PostgresUnavailable(
            f"PostgreSQL for the tests started in {pgdata} but does not answer: {e}"
        ) from e
    return started


def _stop(started: PostgresServer | None, pgdata: str, pid: int) -> None:
    """Stop the server and remove its folder; only in the process that started it."""
    if os.getpid() != pid:
        return  # a forked child exiting: the server is its parent's
    if started is not None:
        try:
            started.cleanup()  # pg_ctl stop (fast: open connections are ended)
        except Exception as e:  # at exit: say so, but remove what can be removed
            print(f"tests' PostgreSQL in {pgdata} did not stop cleanly: {e}")
    shutil.rmtree(pgdata, ignore_errors=True)


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def client_programs() -> str:
    """The folder of the pgserver build's own programs (psql, pg_dump, pg_restore, createdb).

    The same version as the server: a system's pg_dump refuses a newer server.
    """
    from pgserver._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH)


def fresh_database(name_hint: str) -> str:
    """Create a new, empty database (named after ``name_hint``); returns its URL."""
    srv = server()
    stem = re.sub(r"[^a-z0-9]+", "_", name_hint.lower()).strip("_")[:40] or "db"
    name = f"{stem}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return srv.get_uri(database=name)


def drop_database(url: str) -> None:
    """Drop a database made by :func:`fresh_database`, ending connections still open to it."""
    name = conninfo_to_dict(url).get("dbname")
    if not isinstance(name, str) or name in ("postgres", "template0", "template1"):
        raise ValueError(f"not a test database: {url}")
    with psycopg.connect(server().get_uri(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
