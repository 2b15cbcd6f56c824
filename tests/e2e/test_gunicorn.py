"""memsvc under real gunicorn, over real HTTP."""

import json
import subprocess
import sys
import urllib.parse

import pytest
import requests

from tests.support.servers import REPO
from tests.support.servers import free_port
from tests.support.servers import server_env

pytestmark = pytest.mark.e2e


def call(server, method, path, input=None, key=None):
    headers = {"x-api-key": key} if key else {}
    if method == "GET":
        qs = "" if input is None else "?input=" + urllib.parse.quote(json.dumps(input))
        return requests.get(f"{server.trpc}/{path}{qs}", headers=headers, timeout=30)
    return requests.post(f"{server.trpc}/{path}", json=input, headers=headers, timeout=30)


def test_health(server):
    resp = requests.get(server.url + "/health", timeout=5)
    assert resp.status_code == 200
    assert resp.json()["db"] == "connected"


def test_writes_are_visible_to_every_worker_at_once(server):
    key = server.create_key()
    user = "rw-check"
    ids = []
    for i in range(12):
        # A new connection each time, so requests spread over the workers,
        # whose search caches must all notice the write at once.
        content = f"The user's favourite number is {i * 7919}"
        added = call(server, "POST", "memory.add", {"userId": user, "content": content}, key)
        assert added.status_code == 200, added.text
        ids.append(added.json()["result"]["data"]["id"])
        assert call(server, "GET", "memory.getById", {"id": ids[-1]}, key).status_code == 200
        listed = call(server, "GET", "memory.getAll", {"userId": user}, key).json()
        assert len(listed["result"]["data"]) == i + 1
        found = call(server, "GET", "memory.search", {"userId": user, "query": content}, key)
        assert found.json()["result"]["data"][0]["id"] == ids[-1]
    everything = {"userId": user, "query": "x", "threshold": 0, "limit": 100}
    for memory_id in ids[:6]:
        assert call(server, "POST", "memory.delete", {"id": memory_id}, key).status_code == 200
        for _ in range(3):
            found = call(server, "GET", "memory.search", everything, key).json()
            assert memory_id not in [m["id"] for m in found["result"]["data"]]


def test_long_query_urls_are_served(server):
    # The local model takes at most 256 tokens, so a long query is a 400 from
    # memsvc, in its envelope, not an HTML error from gunicorn.
    key = server.create_key()
    resp = call(server, "GET", "memory.search", {"userId": "u", "query": "tea " * 5000}, key)
    assert resp.status_code == 400, resp.text
    assert "too long for the embedding model" in resp.json()["error"]["message"]
    batch = ",".join(["memory.getAll"] * 99)
    inputs = {str(i): {"userId": f"user-{i:040d}"} for i in range(99)}
    resp = requests.get(
        f"{server.trpc}/{batch}",
        params={"batch": "1", "input": json.dumps(inputs)},
        headers={"x-api-key": key},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert len(resp.json()) == 99


def test_a_bad_setting_stops_start_up_with_one_line(tmp_path):
    env = server_env(tmp_path / "db.sqlite3", free_port(), MEMSVC_EMBEDDER="nope")
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "wsgi:app"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "memsvc: MEMSVC_EMBEDDER must be one of local, openai, got 'nope'" in result.stderr
    assert "Traceback" not in result.stderr
