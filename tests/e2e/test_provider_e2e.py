"""A slow embedding provider under gunicorn: the service stays responsive."""

import concurrent.futures
import json
import time

import pytest
import requests

from tests.support.fake_provider import FakeProvider
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


def test_a_slow_provider_cannot_pin_every_worker(tmp_path):
    with FakeProvider(delay=8.0) as provider:
        server = start_server(
            tmp_path,
            WEB_CONCURRENCY="2",
            MEMSVC_THREADS="4",
            MEMSVC_RATE_LIMIT_PER_MINUTE="0",
            MEMSVC_CONCURRENCY_LIMIT="0",
            **provider.settings,
        )
        try:
            key = server.create_key("t", "k")
            headers = {"x-api-key": key, "Content-Type": "application/json"}

            def add(i):
                started = time.monotonic()
                resp = requests.post(
                    server.trpc + "/memory.add",
                    data=json.dumps({"userId": "u", "content": f"slow {i}"}),
                    headers=headers,
                    timeout=60,
                )
                return resp.status_code, resp.json(), time.monotonic() - started

            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                adds = [pool.submit(add, i) for i in range(16)]
                # Calls queue for the provider only until one has waited on it
                # half the timeout (5 s); from then on the provider holds 3
                # threads per worker and no more, and reads run.
                time.sleep(5.5)
                for _ in range(5):
                    t0 = time.monotonic()
                    health = requests.get(server.url + "/health", timeout=10)
                    listed = requests.get(
                        server.trpc + '/memory.getAll?input={"userId":"u"}',
                        headers={"x-api-key": key},
                        timeout=10,
                    )
                    assert health.status_code == 200 and listed.status_code == 200
                    assert time.monotonic() - t0 < 2.0
                results = [a.result() for a in adds]
            ok = [r for r in results if r[0] == 200]
            busy = [r for r in results if r[0] == 503]
            assert len(ok) + len(busy) == 16
            assert 1 <= len(ok) <= 6  # at most 3 per worker waited on the provider
            for _, body, seconds in busy:
                assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
                assert "embedding provider busy" in body["error"]["message"]
                assert seconds < 7.0  # refused once the provider proved slow, not queued
            assert provider.peak["slow"] <= 6
        finally:
            server.stop()
