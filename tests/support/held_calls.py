"""Calls of one tenant held at a fake provider, competing for the tenant's slots."""

from __future__ import annotations

import concurrent.futures
import json
import time

import requests


def held_calls_of_one_tenant(servers, keys, other, provider, held, admitted):
    """18 adds spread over ``keys`` (one tenant's) and ``servers``: how many were admitted.

    The admitted calls are held at the provider until every refusal is
    back, so all compete for the tenant's slots.
    """

    def add(server, key, marker, i):
        resp = requests.post(
            server.trpc + "/memory.add",
            data=json.dumps({"userId": "u", "content": f"{marker} memory {i}"}),
            headers={"x-api-key": key, "Content-Type": "application/json"},
            timeout=120,
        )
        return resp.status_code, resp.json()

    with concurrent.futures.ThreadPoolExecutor(19) as pool:
        calls = [
            pool.submit(add, servers[i % len(servers)], keys[i % len(keys)], "busy", i)
            for i in range(18)
        ]
        try:
            refused = 0
            for call in concurrent.futures.as_completed(calls, timeout=60):
                status, body = call.result()
                assert status == 429, body
                assert "per tenant" in body["error"]["message"]
                refused += 1
                if refused == 18 - admitted:
                    break
            # Another tenant is not held up meanwhile.
            assert pool.submit(add, servers[-1], other, "other", 0).result()[0] == 200
            deadline = time.monotonic() + 30
            while provider.current.get("busy", 0) < admitted and time.monotonic() < deadline:
                time.sleep(0.01)
            assert provider.current.get("busy") == admitted
        finally:
            held.set()
        statuses = [c.result()[0] for c in calls]
    assert statuses.count(200) == admitted, statuses
    assert provider.peak["busy"] == admitted
