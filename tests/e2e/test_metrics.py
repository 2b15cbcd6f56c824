"""/metrics under real gunicorn: two workers' counts add up, survive restarts, parse."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import socket
import time
import urllib.parse

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.servers import free_port
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

TOKEN = "metrics-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
USER = "user-7f3a-private"
QUERY = "what does Zbigniew like to drink"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(
        tmp_path_factory.mktemp("metrics"),
        MEMSVC_METRICS_TOKEN=TOKEN,
        MEMSVC_MAINTENANCE_SECONDS="1",
        MEMSVC_LOG_FORMAT="json",
    )
    yield s
    s.stop()


def scrape(url: str, headers: dict[str, str] = AUTH) -> dict[tuple[str, tuple], float]:
    """Every sample by (name, sorted labels), parsed by prometheus_client's own parser."""
    resp = requests.get(url, headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name, **labels) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    )


def get(server, path, input, key):
    qs = "?input=" + urllib.parse.quote(json.dumps(input))
    # No session: a new connection each time, so calls spread over the workers.
    return requests.get(f"{server.trpc}/{path}{qs}", headers={"x-api-key": key}, timeout=30)


def post(server, path, input, key):
    return requests.post(
        f"{server.trpc}/{path}", json=input, headers={"x-api-key": key}, timeout=30
    )


def workers(server) -> list[int]:
    pid = server.proc.pid
    return [int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def restart_worker(server, pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = workers(server)
        if pid not in now and len(now) == 2:
            # The new one answers (it has loaded the model) before we go on.
            for _ in range(10):
                requests.get(server.url + "/health", timeout=10)
            return
        time.sleep(0.2)
    pytest.fail("gunicorn did not replace the worker")


def run_mix(server, key, limited_key) -> dict[tuple[str, str], int]:
    """A known mix of calls; returns how many of each (procedure, code) were made."""
    made: dict[tuple[str, str], int] = {}

    def expect(resp, procedure, code, n=1):
        made[(procedure, code)] = made.get((procedure, code), 0) + n
        return resp

    for i in range(6):
        r = post(server, "memory.add", {"userId": USER, "content": f"{QUERY} number {i}"}, key)
        assert expect(r, "memory.add", "OK").status_code == 200, r.text
    for _ in range(8):
        r = get(server, "memory.search", {"userId": USER, "query": QUERY, "threshold": 0}, key)
        assert expect(r, "memory.search", "OK").status_code == 200, r.text
    for mode in ("keyword", "hybrid"):
        r = get(server, "memory.search", {"userId": USER, "query": QUERY, "mode": mode}, key)
        assert expect(r, "memory.search", "OK").status_code == 200, r.text
    for _ in range(3):
        r = get(server, "memory.getById", {"id": "00000000-0000-4000-8000-000000000000"}, key)
        assert expect(r, "memory.getById", "NOT_FOUND").status_code == 404
    for _ in range(2):
        r = get(server, "memory.getAll", {"userId": USER}, "sk_memsvc_" + "0" * 64)
        assert expect(r, "memory.getAll", "UNAUTHORIZED").status_code == 401
    r = get(server, "memory.getAll", {"userId": USER, "limit": -1}, key)
    assert expect(r, "memory.getAll", "BAD_REQUEST").status_code == 400
    r = get(server, "memory.nothing", {}, key)
    assert expect(r, "memory.nothing", "NOT_FOUND").status_code == 404
    # One batch of three calls.
    batch = {"0": {"userId": USER}, "1": {"userId": USER}, "2": {"userId": USER}}
    r = requests.get(
        f"{server.trpc}/memory.getAll,memory.getAll,memory.getAll?batch=1&input="
        + urllib.parse.quote(json.dumps(batch)),
        headers={"x-api-key": key},
        timeout=30,
    )
    assert expect(r, "memory.getAll", "OK", 3).status_code == 200
    # 3 calls a minute: the 4th and 5th are refused.
    for i in range(5):
        r = get(server, "memory.getAll", {"userId": USER}, limited_key)
        code = "OK" if i < 3 else "TOO_MANY_REQUESTS"
        assert expect(r, "memory.getAll", code).status_code == (200 if i < 3 else 429)
    return made


def check(samples, made, batches, searches):
    for (procedure, code), n in made.items():
        name = procedure if procedure != "memory.nothing" else "unknown"
        assert value(samples, "memsvc_calls_total", procedure=name, code=code) == n, (
            procedure,
            code,
        )
    calls = sum(made.values())
    assert total(samples, "memsvc_calls_total") == calls
    # Histograms: one observation per call; +Inf bucket == count; buckets grow.
    assert total(samples, "memsvc_call_duration_seconds_count") == calls
    for procedure in {"memory.add", "memory.search", "memory.getAll", "memory.getById"}:
        count = value(samples, "memsvc_call_duration_seconds_count", procedure=procedure)
        assert count == total(samples, "memsvc_calls_total", procedure=procedure)
        inf = value(samples, "memsvc_call_duration_seconds_bucket", procedure=procedure, le="+Inf")
        assert inf == count
        buckets = sorted(
            (float(dict(ls)["le"]), v)
            for (n, ls), v in samples.items()
            if n == "memsvc_call_duration_seconds_bucket" and dict(ls)["procedure"] == procedure
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)
        assert value(samples, "memsvc_call_duration_seconds_sum", procedure=procedure) > 0
    assert value(samples, "memsvc_batch_calls_count") == batches
    assert value(samples, "memsvc_batch_calls_sum") == 3 * batches
    assert value(samples, "memsvc_limiter_refusals_total", reason="rate") == 2 * batches
    assert total(samples, "memsvc_searches_total") == searches
    assert total(samples, "memsvc_searches_total", mode="keyword") == batches
    assert total(samples, "memsvc_searches_total", mode="hybrid") == batches
    # Every search that embeds its query asks the query cache once.
    asked = value(samples, "memsvc_query_cache_hits_total") + value(
        samples, "memsvc_query_cache_misses_total"
    )
    assert asked == searches
    assert value(samples, "memsvc_search_candidates_total") >= 6  # the user's memories
    assert value(samples, "memsvc_embedding_calls_total", provider="local") > 0
    assert value(samples, "memsvc_embedding_failures_total", provider="local") == 0


def limited_key(server, name: str, per_minute: int) -> str:
    secret = server.create_key("tenant-metrics", name)
    key_id = next(
        line.split()[0]
        for line in server.cli("keys", "list").stdout.splitlines()
        if f" {name} " in line
    )
    server.cli("keys", "set-limits", key_id, "--per-minute", str(per_minute))
    return secret


def test_two_workers_counts_add_up_and_survive_restarts(server):
    key = server.create_key("tenant-metrics", "mix")
    assert len(workers(server)) == 2
    before = len(server.output().splitlines())
    made = run_mix(server, key, limited_key(server, "limited-1", 3))
    samples = scrape(server.url + "/metrics")
    check(samples, made, batches=1, searches=10)
    # Both workers answered part of the mix.
    lines = [json.loads(line) for line in server.output().splitlines()[before:] if line[:1] == "{"]
    access = [
        line
        for line in lines
        if line["logger"] == "memsvc.observability.access_log" and "/trpc/" in line["path"]
    ]
    assert len(access) == sum(made.values()) - 2  # the batch's three calls are one request
    assert len({line["pid"] for line in access}) == 2

    # Each worker in turn is restarted: nothing it counted is lost.
    for pid in workers(server):
        restart_worker(server, pid)
        after = scrape(server.url + "/metrics")
        for name in ("memsvc_calls_total", "memsvc_call_duration_seconds_count",
                     "memsvc_searches_total", "memsvc_limiter_refusals_total"):  # fmt: skip
            assert total(after, name) == total(samples, name), name

    # The same mix again, on the new workers: exactly twice the counts.
    run_mix(server, key, limited_key(server, "limited-2", 3))
    samples = scrape(server.url + "/metrics")
    check(samples, {k: 2 * v for k, v in made.items()}, batches=2, searches=20)


def test_metrics_need_the_token_and_carry_no_user_data(server):
    assert requests.get(server.url + "/metrics", timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
    refused = requests.get(server.url + "/metrics", headers=wrong, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED"
    assert TOKEN not in server.output()
    key = server.create_key("tenant-metrics", "labels")
    post(server, "memory.add", {"userId": USER, "content": QUERY}, key)
    get(server, "memory.search", {"userId": USER, "query": QUERY}, key)
    time.sleep(2.5)  # a maintenance round samples the gauges
    text = requests.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    for secret in (USER, QUERY, "Zbigniew", "tenant-metrics", key, key[-20:]):
        assert secret not in text
    samples = scrape(server.url + "/metrics")
    assert value(samples, "memsvc_memories") >= 1
    assert value(samples, "memsvc_end_users") >= 1
    assert value(samples, "memsvc_api_keys") >= 1
    assert value(samples, "memsvc_search_cache_bytes") > 0
    labels = {k: v for (_, ls), _ in samples.items() for k, v in ls}
    # Only memsvc_llm_tokens_total names a tenant (what its budget counts), and only once
    # its jobs have called a model: none here, so no tenant above.
    assert set(labels) <= {"procedure", "code", "provider", "mode", "path", "reason",
                           "operation", "le", "status", "outcome", "tenant", "kind"}  # fmt: skip


def test_without_a_token_or_address_metrics_are_not_served(tmp_path):
    plain = start_server(tmp_path)
    try:
        resp = requests.get(plain.url + "/metrics", headers=AUTH, timeout=10)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "NOT_FOUND"
    finally:
        plain.stop()


def test_a_separate_metrics_address(tmp_path):
    port = free_port()
    s = start_server(tmp_path, MEMSVC_METRICS_BIND=f"127.0.0.1:{port}")
    try:
        key = s.create_key()
        post(s, "memory.add", {"userId": "u", "content": "tea"}, key)
        # Not on the API's address; on its own, without a token (none set).
        assert requests.get(s.url + "/metrics", timeout=10).status_code == 404
        samples = scrape(f"http://127.0.0.1:{port}/metrics", headers={})
        assert value(samples, "memsvc_calls_total", procedure="memory.add", code="OK") == 1
        other = requests.get(f"http://127.0.0.1:{port}/trpc/memory.getAll", timeout=10)
        assert other.status_code == 404
        folder = re.search(r"metric files in (\S+)", s.output()).group(1)
        assert os.path.isdir(folder) and os.listdir(folder)
    finally:
        s.stop()
    # Its folder of metric files went with it; the next start has a new one.
    assert not os.path.exists(folder)


def test_idle_connections_do_not_hold_the_metrics_address(tmp_path):
    """Scrapes are answered while other connections to the address send nothing, or a byte."""
    port = free_port()
    s = start_server(tmp_path, MEMSVC_METRICS_BIND=f"127.0.0.1:{port}")
    idle = []
    try:
        for i in range(4):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                conn.sendall(b"G")  # a request begun and never finished
            idle.append(conn)
        started = time.monotonic()
        for _ in range(3):
            samples = scrape(f"http://127.0.0.1:{port}/metrics", headers={})
            assert samples
        assert time.monotonic() - started < 5
    finally:
        for conn in idle:
            conn.close()
        s.stop()
