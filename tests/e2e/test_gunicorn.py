"""memsvc under real gunicorn, over real HTTP."""

import json
import subprocess
import sys
import time
import urllib.parse

import pytest
import requests

from tests.support.servers import REPO
from tests.support.servers import free_port
from tests.support.servers import server_env
from tests.support.servers import serving
from tests.support.servers import start_server

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
    # 20,000 characters of query in the URL: longer than the model takes, so
    # it is embedded in windows; served, not an HTML error from gunicorn.
    key = server.create_key()
    resp = call(server, "GET", "memory.search", {"userId": "u", "query": "tea " * 5000}, key)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"result": {"data": []}}
    # The long query counted as several calls of the key's 100 a minute (by
    # its embedding windows): the batch takes what is left.
    batch = ",".join(["memory.getAll"] * 90)
    inputs = {str(i): {"userId": f"user-{i:040d}"} for i in range(90)}
    resp = requests.get(
        f"{server.trpc}/{batch}",
        params={"batch": "1", "input": json.dumps(inputs)},
        headers={"x-api-key": key},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert len(resp.json()) == 90


def start_and_fail(tmp_path, command, **settings):
    env = server_env(tmp_path / "db.sqlite3", free_port(), **settings)
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr, time.monotonic() - started


GUNICORN = [sys.executable, "-m", "gunicorn", "wsgi:app"]
MEMSVC_RUN = [sys.executable, "-m", "memsvc.cli", "run"]


BAD_SETTINGS = [
    ("MEMSVC_EMBEDDER", "nope", "MEMSVC_EMBEDDER must be one of local, openai, got 'nope'"),
    ("MEMSVC_THREADS", "0", "MEMSVC_THREADS must be a positive whole number, got 0"),
    ("MEMSVC_BIND", "localhost", "MEMSVC_BIND must be host:port or unix:/path, got 'localhost'"),
    ("WEB_CONCURRENCY", "abc", "WEB_CONCURRENCY must be a positive whole number, got 'abc'"),
]


@pytest.mark.parametrize(
    "command, setting, value, line",
    [(GUNICORN, *bad) for bad in BAD_SETTINGS if bad[0] != "WEB_CONCURRENCY"]
    # gunicorn itself reads WEB_CONCURRENCY as it loads, before any of memsvc:
    # memsvc run checks it first.
    + [(MEMSVC_RUN, *bad) for bad in BAD_SETTINGS],
    ids=lambda v: v[-1] if isinstance(v, list) else None,
)
def test_a_bad_setting_stops_start_up_with_one_line(tmp_path, command, setting, value, line):
    stderr, _ = start_and_fail(tmp_path, command, **{setting: value})
    expected = f"memsvc: {line}" if command is GUNICORN else f"Error: {line}"
    assert stderr.strip().splitlines()[-1] == expected, stderr
    assert len([text for text in stderr.splitlines() if line in text]) == 1


@pytest.mark.parametrize("command", [GUNICORN, MEMSVC_RUN], ids=["gunicorn", "memsvc-run"])
def test_a_busy_port_stops_start_up_at_once_naming_memsvc_bind(server, tmp_path, command):
    address = server.url.removeprefix("http://")
    stderr, _ = start_and_fail(tmp_path, command, MEMSVC_BIND=address)
    line = (
        f"MEMSVC_BIND '{address}': the address is already in use "
        "(another server listens there; choose another port)"
    )
    if command is GUNICORN:
        assert f"memsvc: {line}" in stderr
    else:
        # Only the error: not where it would have served first.
        assert stderr.strip() == f"Error: {line}", stderr
        operations = " ".join((REPO / "docs" / "operations.md").read_text().split())
        assert f"`Error: {line.replace(address, '127.0.0.1:8000')}`" in operations
    # gunicorn's own five retries (a second apart) each print this: none
    # happened. (Not timed: start-up alone takes seconds on a busy machine.)
    assert "Connection in use" not in stderr


@pytest.mark.parametrize("command", [GUNICORN, MEMSVC_RUN], ids=["gunicorn", "memsvc-run"])
def test_a_mistyped_setting_is_warned_of_once(tmp_path, command):
    port = free_port()
    env = server_env(tmp_path / "db.sqlite3", port, MEMSVC_THRESHOLD="0.5")
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/health"
        assert serving(proc, url, 90, log.read_text), log.read_text()
    finally:
        proc.terminate()
        proc.wait(30)
    output = log.read_text()
    warning = (
        "MEMSVC_THRESHOLD is not a memsvc setting and is ignored; did you mean "
        "MEMSVC_RECOMMENDED_THRESHOLD or MEMSVC_SEARCH_DEFAULT_THRESHOLD?"
    )
    assert output.count(warning) == 1, output
    assert output.count("is not a memsvc setting") == 1, output
    if command is MEMSVC_RUN:
        assert output.startswith(f"warning: {warning}\n"), output  # before anything else


def test_too_few_threads_for_the_concurrency_limit_is_warned_of(server, tmp_path):
    assert "MEMSVC_CONCURRENCY_LIMIT" not in server.output()  # 2 x 8 threads > 10
    few = start_server(tmp_path, WEB_CONCURRENCY="1", MEMSVC_THREADS="6")
    try:
        assert (
            "memsvc: warning: 1 worker(s) x 6 threads = 6 threads, not above "
            "MEMSVC_CONCURRENCY_LIMIT (10)"
        ) in few.output()
    finally:
        few.stop()


def test_the_access_log_has_no_query_strings_unless_asked(server, tmp_path):
    key = server.create_key()
    secret_query = "my neighbour's name is Zbigniew"
    call(server, "GET", "memory.search", {"userId": "u-private", "query": secret_query}, key)
    call(server, "GET", "memory.getAll", {"userId": "u-private"}, key)
    time.sleep(0.5)
    log = server.output()
    assert '"GET /trpc/memory.search HTTP/1.1" 200' in log
    assert "Zbigniew" not in log and "u-private" not in log and "input=" not in log
    full = start_server(tmp_path, MEMSVC_LOG_FULL_URLS="true")
    try:
        requests.get(full.trpc + "/memory.getAll?input=%7B%7D", timeout=10)
        time.sleep(0.5)
        assert "/trpc/memory.getAll?input=%7B%7D" in full.output()
    finally:
        full.stop()


def test_reembed_refuses_while_the_server_runs(server):
    result = subprocess.run(
        [sys.executable, "-m", "memsvc.cli", "reembed"],
        env=server.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "a memsvc server is using" in result.stderr
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
