"""Per-key limits hold across four gunicorn workers."""

import concurrent.futures
import json
import threading
import time
import urllib.parse

import pytest
import requests

from tests.support import texts
from tests.support.fake_provider import FakeProvider
from tests.support.held_calls import held_calls_of_one_tenant
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


def test_150_calls_on_one_key_admit_exactly_100(tmp_path):
    server = start_server(tmp_path, WEB_CONCURRENCY="4", MEMSVC_THREADS="4")
    try:
        key, other = server.create_key("t", "busy"), server.create_key("t", "other")
        url = server.trpc + "/memory.getAll?input=" + urllib.parse.quote('{"userId":"u"}')

        def call(_):
            resp = requests.get(url, headers={"x-api-key": key}, timeout=30)
            return resp.status_code, resp.headers.get("Retry-After"), resp.json()

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            results = list(pool.map(call, range(150)))
        statuses = [status for status, _, _ in results]
        assert statuses.count(200) == 100
        assert statuses.count(429) == 50
        for status, retry_after, body in results:
            if status == 429:
                assert 1 <= int(retry_after) <= 60
                assert body["error"]["code"] == "TOO_MANY_REQUESTS"
                assert body["error"]["data"]["path"] == "memory.getAll"
        assert requests.get(url, headers={"x-api-key": other}, timeout=30).status_code == 200
    finally:
        server.stop()


def test_never_more_than_10_calls_of_a_key_execute_at_once(tmp_path):
    # The busy key's admitted calls are held at the provider until every
    # refusal is back: however slow the machine, all 30 compete for the slots.
    held = threading.Event()
    with FakeProvider(gates={"busy": held}, delay=0.1) as provider:
        server = start_server(
            tmp_path,
            WEB_CONCURRENCY="4",
            MEMSVC_THREADS="8",
            # Room for every admitted call at the provider: this test is
            # about the per-key limit, not the per-worker provider bound.
            MEMSVC_EMBEDDING_MAX_CONCURRENCY="7",
            **provider.settings,
        )
        try:
            busy, other = server.create_key("t", "busy"), server.create_key("t2", "other")

            def add(key, marker, i):
                resp = requests.post(
                    server.trpc + "/memory.add",
                    data=json.dumps({"userId": "u", "content": f"{marker} memory {i}"}),
                    headers={"x-api-key": key, "Content-Type": "application/json"},
                    timeout=120,
                )
                return resp.status_code

            with concurrent.futures.ThreadPoolExecutor(31) as pool:
                calls = [pool.submit(add, busy, "busy", i) for i in range(30)]
                try:
                    # Refusals come at once, not after waiting for a slot: all
                    # 20 are back while the 10 admitted calls are still held.
                    refused = 0
                    for call in concurrent.futures.as_completed(calls, timeout=60):
                        assert call.result() == 429
                        refused += 1
                        if refused == 20:
                            break
                    # Another tenant's key is not held up meanwhile.
                    assert pool.submit(add, other, "other", 0).result() == 200
                    # Every admitted call reaches the provider and waits there (an
                    # admitted call may still be on its way when the last refusal
                    # is back).
                    deadline = time.monotonic() + 30
                    while provider.current.get("busy", 0) < 10 and time.monotonic() < deadline:
                        time.sleep(0.01)
                    assert provider.current.get("busy") == 10
                finally:
                    held.set()
                statuses = [c.result() for c in calls]
            assert statuses.count(200) == 10, statuses
            assert statuses.count(429) == 20, statuses
            assert provider.peak["busy"] == 10
        finally:
            server.stop()


def test_long_texts_count_by_their_cost_on_every_worker_together(tmp_path):
    server = start_server(tmp_path, WEB_CONCURRENCY="4", MEMSVC_THREADS="4")
    try:
        key = server.create_key("t", "writer")
        line = next(li for li in server.cli("keys", "list").stdout.splitlines() if " writer " in li)
        server.cli(
            "keys", "set-limits", line.split()[0], "--per-minute", "20", "--concurrent", "20"
        )
        text = texts.english(5_000, seed=4)  # 56 windows: 4 calls' worth

        def add(_):
            resp = requests.post(
                server.trpc + "/memory.add",
                data=json.dumps({"userId": "u", "content": text}),
                headers={"x-api-key": key, "Content-Type": "application/json"},
                timeout=60,
            )
            return resp.status_code, resp.json()

        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            results = list(pool.map(add, range(12)))
        added = sum(status == 200 for status, _ in results)
        refused = [body["error"]["message"] for status, body in results if status == 429]
        assert added + len(refused) == 12 and added >= 1
        # Refused for its cost (it counts as one call) or at once (it counts as
        # none): for the rate, or for the tenant's 10 calls at once while
        # the others wait for the machine's turn to embed their long texts.
        for_cost = [m for m in refused if m.endswith("count as 4 calls (one per 16 windows)")]
        at_once = [
            m
            for m in refused
            if m == "Rate limit exceeded: 20 requests per minute"
            or m.startswith("Too many concurrent requests: at most 10 at once per tenant")
        ]
        assert len(for_cost) + len(at_once) == len(refused)
        url = server.trpc + "/memory.getAll?input=" + urllib.parse.quote('{"userId":"u"}')
        more = 0
        while requests.get(url, headers={"x-api-key": key}, timeout=30).status_code == 200:
            more += 1
        assert 4 * added + len(for_cost) + more == 20
    finally:
        server.stop()


def test_a_tenants_keys_together_execute_no_more_than_its_limit(tmp_path):
    # Three keys, each with room for 10 at once; their tenant has room for 6.
    held = threading.Event()
    with FakeProvider(gates={"busy": held}, delay=0.1) as provider:
        server = start_server(
            tmp_path,
            WEB_CONCURRENCY="4",
            MEMSVC_THREADS="8",
            MEMSVC_TENANT_CONCURRENCY_LIMIT="6",
            MEMSVC_EMBEDDING_MAX_CONCURRENCY="7",
            **provider.settings,
        )
        try:
            keys = [server.create_key("t", f"key {i}") for i in range(3)]
            other = server.create_key("t2", "other")
            held_calls_of_one_tenant([server], keys, other, provider, held, admitted=6)
        finally:
            server.stop()
