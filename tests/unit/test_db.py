import sqlite3

import pytest

from memsvc.store.sqlite import connection as db


def test_driver_can_load_sqlite_vec():
    conn = db.driver().connect(":memory:")
    conn.enable_load_extension(True)
    import sqlite_vec

    sqlite_vec.load(conn)
    assert conn.execute("SELECT vec_version()").fetchone()[0].startswith("v")


def test_driver_prefers_the_standard_module_when_it_can_load_extensions():
    stdlib_can = hasattr(sqlite3.Connection, "enable_load_extension")
    assert (db.driver() is sqlite3) == stdlib_can


def test_connection_has_memsvc_pragmas(db_path):
    conn = db.connect(db_path, busy_timeout_ms=1234, synchronous="FULL")
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1234
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert conn.isolation_level is None


def test_database_keeps_one_connection_per_thread(db_path):
    import threading

    database = db.Database(db_path)
    mine = database.connection()
    assert database.connection() is mine
    seen = []
    thread = threading.Thread(target=lambda: seen.append(database.connection()))
    thread.start()
    thread.join()
    assert seen[0] is not mine
    database.close()
    assert database.connection() is not mine
    database.close()


def test_closed_connections_are_really_closed(db_path):
    database = db.Database(db_path)
    conn = database.connection()
    database.close()
    with pytest.raises(Exception, match="closed"):
        conn.execute("SELECT 1")
