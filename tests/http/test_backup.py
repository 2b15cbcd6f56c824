"""memsvc backup: a consistent copy taken while writes go on, which restores whole."""

import threading
import uuid

import numpy as np
import pytest

from memsvc.models import Memory
from memsvc.store import SqliteStore
from memsvc.store import connect
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

pytestmark = pytest.mark.stores("sqlite")  # PostgreSQL: pg_dump (test below)


def test_backup_under_concurrent_writes_restores_the_same_memories_and_keys(
    app, client, memsvc_cli, db_path, tmp_path, make_app
):
    secret = memsvc_cli("keys", "create", "acme", "laptop").stdout.strip()
    auth = {"x-api-key": secret}
    before = [
        data(mutate(client, "memory.add", {"userId": "u", "content": f"before {i}"}, headers=auth))
        for i in range(5)
    ]
    stop = threading.Event()
    written = []

    def writer():
        # Another connection, as another worker would be, adding all along.
        conn = connect(db_path)
        store = SqliteStore(conn)
        rng = np.random.default_rng(0)
        while not stop.is_set():
            v = rng.standard_normal((10, 384)).astype(np.float32)
            batch = [Memory(str(uuid.uuid4()), "acme", "bulk", "x", {}, 1, 1) for _ in range(10)]
            with store.write():
                store.insert_memories(batch, v)
            written.extend(m.id for m in batch)
        conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(written) < 50:
            threading.Event().wait(0.01)
        target = tmp_path / "backup.sqlite3"
        result = memsvc_cli("backup", str(target))
    finally:
        stop.set()
        thread.join(30)
    assert result.exit_code == 0, result.output
    assert "integrity check ok" in result.stdout

    restored = make_app(DATABASE=str(target))
    rclient = restored.test_client()
    # The key works against the copy, and every memory made before is there.
    for m in before:
        assert data(query(rclient, "memory.getById", {"id": m["id"]}, headers=auth)) == m
    found = data(
        query(rclient, "memory.search", {"userId": "u", "query": "before 3"}, headers=auth)
    )
    assert found[0]["content"] == "before 3"
    copy = SqliteStore(connect(str(target)))
    memories = copy.conn.execute("SELECT count(*) FROM memories").fetchone()[0]
    vectors = copy.conn.execute("SELECT count(*) FROM memory_vectors").fetchone()[0]
    bulk = copy.conn.execute("SELECT count(*) FROM memories WHERE user_id = 'bulk'").fetchone()[0]
    assert memories == vectors  # a snapshot of one moment: no half-written memory
    assert bulk % 10 == 0 and bulk >= 50  # whole transactions only
    assert copy.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    copy.conn.close()


def test_backup_will_not_overwrite_unless_told(memsvc_cli, tmp_path):
    target = tmp_path / "exists.sqlite3"
    target.write_text("precious")
    refused = memsvc_cli("backup", str(target))
    assert refused.exit_code == 1 and "exists" in refused.stderr
    assert target.read_text() == "precious"
    forced = memsvc_cli("backup", str(target), "--force")
    assert forced.exit_code == 0
    assert not (tmp_path / "exists.sqlite3.partial").exists()


@pytest.mark.stores("postgres")
def test_on_postgresql_backup_points_to_pg_dump(memsvc_cli, tmp_path):
    result = memsvc_cli("backup", str(tmp_path / "copy"))
    assert result.exit_code == 1
    assert "back up PostgreSQL with pg_dump" in result.stderr
    assert not (tmp_path / "copy").exists()
