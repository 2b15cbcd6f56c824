"""Two app servers, one PostgreSQL: one set of limits, one truth, revocation everywhere at once.

Two gunicorn instances (2 workers each, the checked-in settings) on
different ports share a database of the tests' private PostgreSQL, as
servers behind one load balancer would.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import threading
import time

import pytest
import requests

from tests.support import figures
from tests.support import postgres
from tests.support.fake_provider import FakeProvider
from tests.support.held_calls import held_calls_of_one_tenant
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e


@pytest.fixture
def database():
    url = postgres.fresh_database("two_servers")
    yield url
    postgres.drop_database(url)


def two_servers(tmp_path, database, **settings):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_server(tmp_path / "a", MEMSVC_DATABASE=database, **settings)
    try:
        b = start_server(tmp_path / "b", MEMSVC_DATABASE=database, **settings)
    except BaseException:
        a.stop()
        raise
    return a, b


def call(server, method, procedure, body, headers):
    url = f"{server.trpc}/{procedure}"
    if method == "GET":
        return requests.get(url, params={"input": json.dumps(body)}, headers=headers, timeout=60)
    return requests.post(
        url,
        data=json.dumps(body),
        headers={**headers, "Content-Type": "application/json"},
        timeout=60,
    )


def test_two_servers_share_writes_revocations_and_the_rate_limit(tmp_path, database):
    a, b = two_servers(tmp_path, database)
    try:
        key = {"x-api-key": a.create_key("acme", "shared")}
        # Written through one, found through the other in the very next search,
        # and the other way round, with search caches warm on both.
        for i, (writer, reader) in enumerate([(a, b), (b, a), (a, b), (b, a)]):
            text = f"note {i}: the spare key is under the blue flowerpot number {i}"
            added = call(writer, "POST", "memory.add", {"userId": "u", "content": text}, key)
            assert added.status_code == 200, added.text
            found = call(reader, "GET", "memory.search", {"userId": "u", "query": text}, key)
            assert found.json()["result"]["data"][0]["id"] == added.json()["result"]["data"]["id"]
        deleted = call(
            b, "POST", "memory.delete", {"id": added.json()["result"]["data"]["id"]}, key
        )
        assert deleted.status_code == 200
        after = call(a, "GET", "memory.search", {"userId": "u", "query": text}, key).json()
        assert added.json()["result"]["data"]["id"] not in [
            m["id"] for m in after["result"]["data"]
        ]
        used = 4 * 2 + 2  # calls so far with this key
        # The 101st call of the minute through either server is refused.
        statuses = []
        for server in itertools.islice(itertools.cycle([a, b]), 100 - used + 2):
            statuses.append(call(server, "GET", "memory.getAll", {"userId": "u"}, key).status_code)
        assert statuses[: 100 - used] == [200] * (100 - used)
        assert statuses[100 - used :] == [429, 429]
        # A key revoked through one server is refused by the other at once.
        token = {"Authorization": f"Bearer {a.token('acme')}"}
        victim = a.create_key("acme", "victim")
        victim_headers = {"x-api-key": victim}
        assert call(b, "GET", "memory.getAll", {"userId": "u"}, victim_headers).status_code == 200
        listed = call(a, "GET", "keys.list", {}, token).json()["result"]["data"]
        (victim_id,) = [k["id"] for k in listed if k["name"] == "victim"]
        assert call(a, "POST", "keys.revoke", {"id": victim_id}, token).status_code == 200
        refused = call(b, "GET", "memory.getAll", {"userId": "u"}, victim_headers)
        assert refused.status_code == 401
        figures.report(
            "postgres: 2 servers x 2 workers on one database: writes found through the other "
            "server at once (4 of 4), a delete seen at once, the 101st call of a minute refused "
            f"on either ({statuses.count(200) + used} admitted), revocation refused at once"
        )
    finally:
        a.stop()
        b.stop()


def test_ten_concurrent_calls_spread_over_two_servers_admit_no_eleventh(tmp_path, database):
    # The admitted calls are held at the provider until every refusal is
    # back: however slow the machine, all 30 compete for the 10 slots.
    held = threading.Event()
    with FakeProvider(gates={"busy": held}) as provider:
        a, b = two_servers(
            tmp_path,
            database,
            MEMSVC_EMBEDDING_MAX_CONCURRENCY="7",
            **provider.settings,
        )
        try:
            busy = a.create_key("acme", "busy")

            def add(server, i):
                resp = call(
                    server,
                    "POST",
                    "memory.add",
                    {"userId": "u", "content": f"busy memory {i}"},
                    {"x-api-key": busy},
                )
                return resp.status_code

            with concurrent.futures.ThreadPoolExecutor(30) as pool:
                calls = [pool.submit(add, (a, b)[i % 2], i) for i in range(30)]
                try:
                    # Refused at once: all 20 refusals are back while the 10
                    # admitted calls are still held.
                    refused = 0
                    for done in concurrent.futures.as_completed(calls, timeout=60):
                        assert done.result() == 429
                        refused += 1
                        if refused == 20:
                            break
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
            figures.report(
                "postgres: 30 concurrent adds of one key over 2 servers: 10 admitted, 20 refused "
                f"429 at once; at most {provider.peak['busy']} at the provider together"
            )
        finally:
            a.stop()
            b.stop()


def test_a_tenants_keys_together_execute_no_more_than_its_limit_over_two_servers(
    tmp_path, database
):
    held = threading.Event()
    with FakeProvider(gates={"busy": held}) as provider:
        a, b = two_servers(
            tmp_path,
            database,
            MEMSVC_TENANT_CONCURRENCY_LIMIT="6",
            MEMSVC_EMBEDDING_MAX_CONCURRENCY="7",
            **provider.settings,
        )
        try:
            keys = [a.create_key("acme", f"key {i}") for i in range(3)]
            other = b.create_key("other-tenant", "other")
            held_calls_of_one_tenant([a, b], keys, other, provider, held, admitted=6)
        finally:
            a.stop()
            b.stop()
