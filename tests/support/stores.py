"""A store on a test's database, whichever kind it is (a SQLite path or a PostgreSQL URL)."""

from __future__ import annotations

import json
import typing as t

import numpy as np

from memsvc.store import SqliteStore
from memsvc.store import Store
from memsvc.store import connect
from memsvc.store import is_postgres


def open_store(database: str) -> Store:
    """A store on its own new connection; close it with :func:`close_store`."""
    if is_postgres(database):
        from memsvc.store.postgres import PgStore
        from memsvc.store.postgres.connection import PgDatabase

        return PgStore(PgDatabase(database, max_size=1).connect())
    return SqliteStore(connect(database))


def close_store(store: Store) -> None:
    t.cast(t.Any, store).conn.close()


def raw_vector(store: Store, tenant: str, user_id: str, vid: int) -> np.ndarray:
    """One stored vector, read without the store's own vector code (for cross-checks)."""
    conn = t.cast(t.Any, store).conn
    if isinstance(store, SqliteStore):
        (blob,) = conn.execute(
            "SELECT embedding FROM memory_vectors WHERE rowid = ?", (vid,)
        ).fetchone()
        return np.frombuffer(blob, dtype=np.float32)
    (text,) = conn.execute(
        "SELECT embedding::text FROM memory_vectors WHERE tenant = %s AND user_id = %s "
        "AND vid = %s",
        (tenant, user_id, vid),
    ).fetchone()
    return np.array(json.loads(text), dtype=np.float32)


def sql(store: Store, query: str) -> str:
    """``query`` written with ``?`` placeholders, in the store's own placeholder style."""
    return query if isinstance(store, SqliteStore) else query.replace("?", "%s")


def tables_holding(store: Store, text: str) -> list[str]:
    """The tables (shadow tables included) with a row holding ``text``, in any column."""
    conn = t.cast(t.Any, store).conn
    found = []
    if isinstance(store, SqliteStore):
        names = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE "
                "'CREATE VIRTUAL TABLE%'"
            )
        ]
        needle = text.encode("utf-8")
        for name in names:
            for row in conn.execute(f'SELECT * FROM "{name}"'):
                cells = [c.encode() if isinstance(c, str) else c for c in row]
                if any(isinstance(c, bytes) and needle in c for c in cells):
                    found.append(name)
                    break
        return found
    names = [
        name
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
    ]
    for name in names:
        (hit,) = conn.execute(
            f'SELECT EXISTS (SELECT 1 FROM "{name}" AS r WHERE strpos(r::text, %s) > 0)', (text,)
        ).fetchone()
        if hit:
            found.append(name)
    return found
