"""Two gunicorn workers share one lane of long texts: another tenant's calls never wait in it."""

from __future__ import annotations

import concurrent.futures
import fcntl
import json
import os
import pathlib
import time
import urllib.parse

import pytest
import requests

from tests.support import texts
from tests.support.servers import Server
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


def _workers(server: Server) -> set[int]:
    pid = server.proc.pid
    return {int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def _waiting_at(path: pathlib.Path) -> list[int]:
    """The processes waiting for the lock of ``path`` (from /proc/locks: ``N: -> FLOCK ...``)."""
    inode = os.stat(path).st_ino
    pids = []
    for line in pathlib.Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->" and fields[2] == "FLOCK":
            if int(fields[6].rsplit(":", 1)[1]) == inode:
                pids.append(int(fields[5]))
    return pids


def test_long_texts_wait_for_the_machines_lane_and_another_tenants_calls_do_not(tmp_path, database):
    server = start_server(tmp_path, MEMSVC_DATABASE=database, MEMSVC_LONG_TEXTS_AT_ONCE="1")
    try:
        a_key, b_key = server.create_key("tenant-A", "a"), server.create_key("tenant-B", "b")

        def add(key: str, content: str) -> tuple[int, dict]:
            resp = requests.post(
                server.trpc + "/memory.add",
                data=json.dumps({"userId": "u", "content": content}),
                headers={"x-api-key": key, "Content-Type": "application/json"},
                timeout=300,
            )
            return resp.status_code, resp.json()

        def search(key: str, query: str) -> tuple[int, dict]:
            url = (
                server.trpc
                + "/memory.search?input="
                + urllib.parse.quote(json.dumps({"userId": "u", "query": query, "threshold": 0}))
            )
            resp = requests.get(url, headers={"x-api-key": key}, timeout=300)
            return resp.status_code, resp.json()

        # The lane's only place, taken by this process: every long text of
        # every worker now waits for it.
        lane = tmp_path / "limits" / "long-texts-0.lock"
        held = os.open(lane, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(held, fcntl.LOCK_EX)
        pool = concurrent.futures.ThreadPoolExecutor(5)
        try:
            # A: long memories (56 windows each: embedded in the lane), and a
            # query of 65,536 Chinese characters (too many windows: cut in the
            # lane, then refused).
            a_adds = [pool.submit(add, a_key, texts.english(5_000, seed=i)) for i in range(4)]
            a_search = pool.submit(search, a_key, texts.chinese(65_536))
            deadline = time.monotonic() + 120
            while not _waiting_at(lane):
                assert time.monotonic() < deadline, "no worker waited for the lane"
                time.sleep(0.05)
            # B meanwhile: a memory, a search, a memory of 1,000 characters.
            assert add(b_key, "B likes green tea")[0] == 200
            status, found = search(b_key, "What does B drink?")
            assert status == 200
            assert found["result"]["data"][0]["content"] == "B likes green tea"
            assert add(b_key, texts.english(1_000, seed=99))[0] == 200
            # ...answered while every call of A still waits.
            assert not any(call.done() for call in [*a_adds, a_search])
            waiting = _waiting_at(lane)
            # One thread of a worker waits at the lane, its others behind it.
            assert set(waiting) <= _workers(server) and len(waiting) == len(set(waiting))
        finally:
            os.close(held)
            pool.shutdown(wait=False)
        for call in a_adds:
            assert call.result(timeout=300)[0] == 200
        status, refused = a_search.result(timeout=300)
        assert status == 400 and "too long to embed in one call" in refused["error"]["message"]
    finally:
        server.stop()
