"""The operations docs' procedures, done as written against a real server."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.parse

import pytest
import requests

from tests.support.servers import REPO
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


def call(server, path, input, key, method="GET"):
    if method == "GET":
        url = f"{server.trpc}/{path}?input=" + urllib.parse.quote(json.dumps(input))
        resp = requests.get(url, headers={"x-api-key": key}, timeout=30)
    else:
        resp = requests.post(f"{server.trpc}/{path}", json=input, headers={"x-api-key": key})
    assert resp.status_code == 200, resp.text
    return resp.json()["result"]["data"]


def test_backup_while_serving_then_the_documented_restore(tmp_path):
    server = start_server(tmp_path)
    try:
        key = server.create_key("acme", "ops")
        for i in range(5):
            call(server, "memory.add", {"userId": "u", "content": f"kept {i}"}, key, "POST")
        before_list = call(server, "memory.getAll", {"userId": "u"}, key)
        before_search = call(server, "memory.search", {"userId": "u", "query": "kept 3"}, key)
        backup = tmp_path / "backups" / "memsvc.sqlite3"
        backup.parent.mkdir()
        result = server.cli("backup", str(backup))
        assert "Backed up 5 memories and 1 API key" in result.stdout
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        call(server, "memory.add", {"userId": "u", "content": "after the backup"}, key, "POST")
        call(server, "memory.delete", {"id": before_list[0]["id"]}, key, "POST")
    finally:
        server.stop()  # 1. stop memsvc

    # 2. the copy in place of the database, its -wal and -shm removed
    database = tmp_path / "memsvc.sqlite3"
    database.write_bytes(backup.read_bytes())
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{database}{suffix}"):
            os.remove(f"{database}{suffix}")

    restored = start_server(tmp_path)  # 3. start memsvc
    try:
        assert call(restored, "memory.getAll", {"userId": "u"}, key) == before_list
        again = call(restored, "memory.search", {"userId": "u", "query": "kept 3"}, key)
        assert again == before_search
        listed = call(restored, "memory.search", {"userId": "u", "query": "x", "threshold": 0}, key)
        assert "after the backup" not in [m["content"] for m in listed]
    finally:
        restored.stop()


def test_backup_into_a_missing_folder_says_so(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "memsvc.cli", "backup", str(tmp_path / "nope" / "b.sqlite3")],
        env={**os.environ, "MEMSVC_DATABASE": str(tmp_path / "db.sqlite3")},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"Error: backup failed: the folder {tmp_path / 'nope'} does not exist"
    )
