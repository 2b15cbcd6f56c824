"""Erasure on PostgreSQL with statistics collected: after ANALYZE (autovacuum's own does it)
the planner's statistics (pg_statistic) hold sample values of memsvc's columns: user ids,
texts, metadata. The procedure docs/operations.md gives, run as written, must leave no byte of
an erased user in any relation file of the database, pg_statistic's included."""

from __future__ import annotations

import os
import pathlib
import re
import time

import psycopg
import pytest

from memsvc import clock
from memsvc.api.context import runtime
from memsvc.services import memories
from tests.support.helpers import data
from tests.support.helpers import maintenance_round
from tests.support.helpers import mutate

pytestmark = pytest.mark.stores("postgres")

VICTIM = "erin.victim+stats41@example.org"
TEXT = "erinlockercode88317 is in the blue drawer"
EARLIER = "erinearlierversion55210 before the update"
META_KEY = "erinmetakey66014"
META_VALUE = "erinmetavalue77125"
MARKERS = [VICTIM, TEXT.split()[0], EARLIER.split()[0], META_KEY, META_VALUE]
TABLES = "memories, memory_history, memory_vectors, memory_terms, memory_users"

OPERATIONS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_procedure() -> list[str]:
    """The statements of operations.md's erasure procedure for PostgreSQL, as written there."""
    text = OPERATIONS.read_text(encoding="utf-8")
    blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
    [block] = [b for b in blocks if "VACUUM" in b and "memory_users" in b]
    statements = [s.strip() for s in block.split(";") if s.strip()]
    assert statements
    return statements


def relation_files(database: str) -> bytes:
    """Every byte of every file of the database's relations, once its buffers are on disk."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        (folder,) = conn.execute("SHOW data_directory").fetchone()
        (oid,) = conn.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    base = pathlib.Path(folder) / "base" / str(oid)
    return b"".join(
        (base / name).read_bytes() for name in sorted(os.listdir(base)) if name[0].isdigit()
    )


def statistics_file(database: str) -> bytes:
    with psycopg.connect(database, autocommit=True) as conn:
        (folder,) = conn.execute("SHOW data_directory").fetchone()
        (path,) = conn.execute("SELECT pg_relation_filepath('pg_statistic')").fetchone()
    return (pathlib.Path(folder) / path).read_bytes()


def analyze(database: str) -> None:
    """What autovacuum does on its own once enough rows changed."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"ANALYZE {TABLES}")


def add(client, auth, user, content, **fields):
    body = {"userId": user, "content": content, **fields}
    return data(mutate(client, "memory.add", body, headers=auth))


@pytest.mark.parametrize("how", ["deleteAll", "delete the last memory", "expiry"])
def test_no_byte_of_an_erased_user_survives_the_documented_procedure(
    app, client, auth, database, how
):
    # Others' memories, so that statistics are gathered over a crowd.
    for i in range(40):
        c = add(
            client, auth, f"crowd-{i % 8}", f"crowd memory {i} on topic {i % 5}", metadata={"n": i}
        )
        body = {"id": c["id"], "content": f"crowd memory {i}, updated"}
        data(mutate(client, "memory.update", body, headers=auth))
    expiry_ms = clock.now_ms() + 1500
    expires = {"expiresAt": clock.iso(expiry_ms)} if how == "expiry" else {}
    m = add(client, auth, VICTIM, EARLIER, metadata={META_KEY: META_VALUE}, **expires)
    data(mutate(client, "memory.update", {"id": m["id"], "content": TEXT}, headers=auth))
    analyze(database)
    before = relation_files(database)
    assert [x for x in MARKERS if x.encode() not in statistics_file(database)] == []
    assert all(x.encode() in before for x in MARKERS)  # the test can fail

    if how == "deleteAll":
        data(mutate(client, "memory.deleteAll", {"userId": VICTIM}, headers=auth))
    elif how == "delete the last memory":
        data(mutate(client, "memory.delete", {"id": m["id"]}, headers=auth))
    else:
        time.sleep(max(0.0, (expiry_ms - clock.now_ms()) / 1000 + 0.05))
        with app.app_context():
            assert memories.purge_expired(runtime().store()) == 1
    maintenance_round(app)
    analyze(database)  # autovacuum may well have run in between: the erased rows are gone
    with psycopg.connect(database, autocommit=True) as conn:
        for statement in documented_procedure():
            conn.execute(statement)
    after = relation_files(database)
    assert [x for x in MARKERS if x.encode() in after] == []
    assert b"crowd memory" in after  # the others' data is all there
