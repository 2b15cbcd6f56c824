"""A worker killed with SIGKILL while it writes a snapshot file leaves nothing read wrong.

Real gunicorn (2 workers) shares a large user's vectors through snapshot
files (every user shared here), on SQLite and on PostgreSQL. Each cycle
writes to the user through another connection, so that the next search
publishes a new file, sends that search, and SIGKILLs the worker the moment
its temporary file appears (its pid is in the name), half way through
writing it: the first cycle catches a first load, which writes the file
while it reads the vectors from the database. gunicorn starts a new worker.
Then every published file must open as whole and hold exactly the stored
vectors of the ids it names; searches through every worker find each probed
memory first, with similarity 1; and maintenance removes the killed
writers' temporary files.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import threading
import time
import uuid

import numpy as np
import pytest
import requests

from memsvc.models import Memory
from memsvc.search import snapshot_file
from tests.support.fake_provider import UnitProvider
from tests.support.fake_provider import unit_vector
from tests.support.servers import start_server
from tests.support.stores import close_store
from tests.support.stores import open_store

pytestmark = pytest.mark.e2e

DIMS = 256
MEMORIES = 20_000  # a 20 MB file: long enough to write that a kill lands inside
CYCLES = 3
USER = "large"


def add(database: str, first: int, count: int) -> None:
    store = open_store(database)
    try:
        memories = [
            Memory(str(uuid.uuid4()), "tenant-A", USER, f"fact {i}", {}, 1000 + i, 1000 + i)
            for i in range(first, first + count)
        ]
        vectors = np.stack([unit_vector(m.content, DIMS) for m in memories])
        with store.write():
            store.insert_memories(memories, vectors)
    finally:
        close_store(store)


def workers(pid: int) -> list[int]:
    return [int(c) for c in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def temporary(folder: pathlib.Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(snapshot_file.TMP_SUFFIX)]


def check_files(folder: pathlib.Path, database: str) -> int:
    """Every published file is whole and holds exactly the stored vectors; how many there are."""
    store = open_store(database)
    try:
        rows = store.conn.execute("SELECT first_vid, content FROM memories").fetchall()
    finally:
        close_store(store)
    content = dict(rows)
    files = [folder / n for n in os.listdir(folder) if n.endswith(snapshot_file.SUFFIX)]
    for path in files:
        f = snapshot_file.open_file(str(path), "tenant-A", USER, DIMS)
        assert f is not None, f"{path.name} does not open whole"
        expected = np.stack([unit_vector(content[int(v)], DIMS) for v in f.vids])
        assert np.array_equal(f.matrix, expected)
        assert np.allclose(f.scale, 1 / np.linalg.norm(expected, axis=1), rtol=1e-6)
    return len(files)


def test_a_worker_killed_while_publishing_a_snapshot_leaves_none_read_wrong(tmp_path, database):
    folder = tmp_path / "snapshots"
    with UnitProvider(DIMS) as provider:
        store = open_store(database)
        store.migrate("openai:fake", DIMS)
        close_store(store)
        add(database, 0, MEMORIES)
        server = start_server(
            tmp_path,
            **provider.settings,
            MEMSVC_DATABASE=database,
            MEMSVC_SEARCH_SHARED_MIN_KB="0",
            MEMSVC_SEARCH_SHARED_DIR=str(folder),
            MEMSVC_MAINTENANCE_SECONDS="1",
        )
        try:
            key = server.create_key()
            total = MEMORIES
            rng = random.Random(7)

            def search(text: str) -> list[dict]:
                payload = json.dumps({"userId": USER, "query": text, "threshold": 0, "limit": 3})
                resp = requests.get(
                    server.trpc + "/memory.search",
                    params={"input": payload},
                    headers={"x-api-key": key},
                    timeout=120,
                )
                assert resp.status_code == 200, resp.text
                return resp.json()["result"]["data"]

            kills = 0
            for _ in range(CYCLES * 4):
                if kills == CYCLES:
                    break
                if os.path.isdir(folder):
                    # A sixteenth more: the next search publishes a new file.
                    add(database, total, total // 16 + 1)
                    total += total // 16 + 1
                thread = threading.Thread(target=lambda: _quietly(search, "fact 1"))
                thread.start()
                killed = None
                while thread.is_alive() and killed is None:
                    for name in temporary(folder) if os.path.isdir(folder) else []:
                        pid = int(name.split(".")[-3])
                        if pid in workers(server.proc.pid):
                            os.kill(pid, signal.SIGKILL)
                            killed = pid
                            break
                    time.sleep(0.0005)
                thread.join(120)
                if killed is None:
                    continue  # the write was over before it was seen: try again
                kills += 1
                _wait_for_workers(server.proc.pid, killed)
                check_files(folder, database)
                # Every worker answers from a file or the store, and answers right.
                probes = [f"fact {rng.randrange(total)}" for _ in range(8)] + [f"fact {total - 1}"]
                for text in probes:
                    found = search(text)
                    assert found[0]["content"] == text
                    assert found[0]["similarity"] == pytest.approx(1.0, abs=1e-6)
            assert kills == CYCLES, "no write was caught half way"
            assert check_files(folder, database) >= 1
            end = time.monotonic() + 30
            while temporary(folder) and time.monotonic() < end:
                time.sleep(0.2)
            assert temporary(folder) == []
        finally:
            server.stop()


def _quietly(fn, *args) -> None:
    """A search whose worker is killed under it: its connection just breaks."""
    try:
        fn(*args)
    except (requests.ConnectionError, AssertionError):
        pass


def _wait_for_workers(master: int, killed: int) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        alive = workers(master)
        if len(alive) == 2 and killed not in alive:
            return
        time.sleep(0.1)
    pytest.fail("gunicorn did not replace the killed worker")
