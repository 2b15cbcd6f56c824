"""The operations docs' procedures, done as written against a real server."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import urllib.parse

import psycopg
import pytest
import requests
from psycopg.conninfo import conninfo_to_dict

from tests.e2e.test_docs import blocks
from tests.support import postgres
from tests.support.servers import MODEL_CACHE
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


# -- PostgreSQL ------------------------------------------------------------------------


def operations_blocks(section: str) -> list[str]:
    """The ``sh`` blocks of a section of docs/operations.md, as written."""
    text = (REPO / "docs" / "operations.md").read_text()
    start = text.index(section)
    end = text.find("\n## ", start)
    return [b.code for b in blocks(text[start : end if end != -1 else None]) if b.lang == "sh"]


class Operator:
    """Runs the docs' shell commands against the tests' PostgreSQL, changed only where they
    must be: the database server is the tests' (its superuser for ``sudo -u postgres``, its
    socket for ``db.internal``), backups go to a temporary folder, memsvc is this one."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.socket = conninfo_to_dict(postgres.server().get_uri())["host"]
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MEMSVC_", "PG"))},
            "PATH": postgres.client_programs() + os.pathsep + os.environ["PATH"],
            "PGHOST": self.socket,
            "PGUSER": "postgres",
            "MEMSVC_MODEL_CACHE_DIR": MODEL_CACHE,
            "MEMSVC_JWT_SECRET": "operator-secret-" + "x" * 32,
        }

    def url(self, database: str) -> str:
        return f"postgresql://memsvc:change-me@/{database}?host={self.socket}"

    def as_written(self, code: str) -> str:
        code = code.replace("sudo -u postgres ", "")
        code = re.sub(r"@db\.internal/(\w+)'", rf"@/\1?host={self.socket}'", code)
        code = code.replace("/var/backups/", f"{self.tmp_path}/")
        code = code.replace("$(date +%F)", "2026-11-23")  # the day the restore names
        return code.replace(".venv/bin/", os.path.dirname(sys.executable) + "/")

    def run(self, code: str, *, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + self.as_written(code)],
            cwd=self.tmp_path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check:
            assert result.returncode == 0, f"{code}\n{result.stdout}\n{result.stderr}"
        return result

    def clean_up(self) -> None:
        with psycopg.connect(postgres.server().get_uri(), autocommit=True) as conn:
            for name in ("memsvc_restored", "memsvc"):
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute("DROP ROLE IF EXISTS memsvc")


@pytest.fixture
def operator(tmp_path):
    op = Operator(tmp_path)
    op.clean_up()  # a run stopped half-way left them
    (setup,) = [b for b in operations_blocks("## PostgreSQL") if "CREATE ROLE" in b]
    op.run(setup)  # the role, its database, the extension: as the docs set them up
    yield op
    op.clean_up()


def served_by(tmp_path, operator, database):
    secret = operator.env["MEMSVC_JWT_SECRET"]
    return start_server(tmp_path, MEMSVC_DATABASE=operator.url(database), MEMSVC_JWT_SECRET=secret)


@pytest.mark.stores("postgres")
def test_the_documented_postgresql_backup_and_restore(tmp_path, operator):
    dump, restore = operations_blocks("### Backup and restore with PostgreSQL")
    server = served_by(tmp_path, operator, "memsvc")
    try:
        key = server.create_key("acme", "ops")
        for i in range(5):
            call(server, "memory.add", {"userId": "u", "content": f"kept {i}"}, key, "POST")
        before_list = call(server, "memory.getAll", {"userId": "u"}, key)
        before_search = call(server, "memory.search", {"userId": "u", "query": "kept 3"}, key)
        operator.run(dump)  # while the server serves
        call(server, "memory.add", {"userId": "u", "content": "after the backup"}, key, "POST")
    finally:
        server.stop()  # stop the servers

    restored = operator.run(restore)
    assert "Database ready" in restored.stdout
    assert "memsvc_restored" in restored.stdout

    server = served_by(tmp_path, operator, "memsvc_restored")
    try:
        assert call(server, "memory.getAll", {"userId": "u"}, key) == before_list
        assert call(server, "memory.search", {"userId": "u", "query": "kept 3"}, key) == (
            before_search
        )
        listed = call(server, "memory.search", {"userId": "u", "query": "x", "threshold": 0}, key)
        assert "after the backup" not in [m["content"] for m in listed]
        call(server, "memory.add", {"userId": "u", "content": "written after"}, key, "POST")
    finally:
        server.stop()


@pytest.mark.stores("postgres")
def test_a_restore_that_missed_the_vectors_is_refused_naming_what_is_missing(tmp_path, operator):
    """The procedure as the docs once gave it: the extension could not be created by
    memsvc's role, so neither could memory_vectors; pg_restore went on past the errors."""
    dump, _ = operations_blocks("### Backup and restore with PostgreSQL")
    server = served_by(tmp_path, operator, "memsvc")
    try:
        key = server.create_key("acme", "ops")
        call(server, "memory.add", {"userId": "u", "content": "kept"}, key, "POST")
        operator.run(dump)
    finally:
        server.stop()
    failed = operator.run(
        "createdb -O memsvc memsvc_restored\n"
        "pg_restore --no-owner --role=memsvc -d memsvc_restored "
        "/var/backups/memsvc-2026-11-23.dump",
        check=False,
    )
    assert failed.returncode == 1
    assert 'permission denied to create extension "vector"' in failed.stderr

    refused = operator.run(
        "MEMSVC_DATABASE='postgresql://memsvc:change-me@db.internal/memsvc_restored' "
        ".venv/bin/memsvc init-db",
        check=False,
    )
    assert refused.returncode == 1
    assert "Database ready" not in refused.stdout
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("Error: MEMSVC_DATABASE (PostgreSQL database memsvc_restored on ")
    assert line.endswith(
        "cannot be used: its schema is incomplete, missing extension vector, table "
        "memory_vectors, index memory_vectors_pkey; restore it again, whole (see Backup and "
        "restore in docs/operations.md)"
    )
