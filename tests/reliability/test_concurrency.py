"""Mixed traffic from many threads against four gunicorn workers: nothing lost, nothing doubled.

Sixteen client threads add, search, list, fetch and delete memories of two
tenants' shared users for ``MEMSVC_SOAK_SECONDS`` (5 by default), each
keeping a record of what it was told. Every answer must be a success, or a
404 where another thread may have deleted the memory first: no 5xx, no
"database is locked". Each thread reads its own writes on whichever worker
serves it (the per-worker search caches must agree with the database), and
at the end each user's memories are exactly the acknowledged adds minus the
acknowledged deletes, each once.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import threading
import time
import typing as t
import uuid

import pytest
import requests

from memsvc.store import connect
from tests.support import figures
from tests.support.fake_provider import FakeProvider
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

# Read at import: the suite's autouse fixture clears MEMSVC_* before each test.
SOAK_SECONDS = float(os.environ.get("MEMSVC_SOAK_SECONDS", "5"))
SOAK_SEED = int(os.environ.get("MEMSVC_SOAK_SEED", str(random.SystemRandom().randrange(10**6))))
THREADS = 16
TENANTS = ("tenant-a", "tenant-b")
USERS = ("user-0", "user-1", "user-2")
#: Most live memories one thread keeps per user; past it, it deletes instead of adding.
MAX_OWN = 40
REQUEST_TIMEOUT = 30.0


def server_settings(provider: FakeProvider) -> dict[str, str]:
    return {
        "WEB_CONCURRENCY": "4",
        "MEMSVC_THREADS": "4",
        "MEMSVC_RATE_LIMIT_PER_MINUTE": "0",
        "MEMSVC_CONCURRENCY_LIMIT": "0",
        # Sixteen threads share two tenants: the per-tenant bound would
        # refuse some (429, by design); this test is about losing nothing.
        "MEMSVC_TENANT_CONCURRENCY_LIMIT": "0",
        **provider.settings,
    }


@dataclasses.dataclass
class Tally:
    """Everything one client thread saw."""

    requests: int = 0
    by_operation: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    #: (operation, status, body) of every answer that is not what it should be
    errors: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    #: id -> (tenant, user, content) of adds answered 200
    added: dict[str, tuple[str, str, str]] = dataclasses.field(default_factory=dict)
    #: ids whose delete was answered 200
    deleted: set[str] = dataclasses.field(default_factory=set)


class Client:
    """One thread's calls, over its own keep-alive connection."""

    def __init__(self, base: str, keys: dict[str, str], tally: Tally):
        self.base = base
        self.keys = keys
        self.tally = tally
        self.session = requests.Session()

    def call(
        self, tenant: str, path: str, input: t.Any, ok: tuple[int, ...] = (200,)
    ) -> tuple[int, t.Any]:
        headers = {"x-api-key": self.keys[tenant]}
        try:
            if path in ("memory.add", "memory.delete"):
                resp = self.session.post(
                    f"{self.base}/trpc/{path}",
                    data=json.dumps(input),
                    headers={**headers, "Content-Type": "application/json"},
                    timeout=REQUEST_TIMEOUT,
                )
            else:
                resp = self.session.get(
                    f"{self.base}/trpc/{path}",
                    params={"input": json.dumps(input)},
                    headers=headers,
                    timeout=REQUEST_TIMEOUT,
                )
        except requests.RequestException as e:
            self.tally.errors.append((path, 0, f"{type(e).__name__}: {e}"))
            return 0, None
        self.tally.requests += 1
        self.tally.by_operation[path] += 1
        text = resp.text
        if resp.status_code not in ok or "database is locked" in text:
            self.tally.errors.append((path, resp.status_code, text[:300]))
            return resp.status_code, None
        body = resp.json()
        return resp.status_code, body["result"]["data"] if "result" in body else body

    def mismatch(self, what: str) -> None:
        self.tally.errors.append(("read-your-writes", 200, what))


def _traffic(n: int, base: str, keys: dict[str, str], tally: Tally, until: float, seed: int):
    rng = random.Random(seed * 1000 + n)
    client = Client(base, keys, tally)
    # Memories this thread added and has not deleted: (tenant, user) -> {id: content}.
    mine: dict[tuple[str, str], dict[str, str]] = collections.defaultdict(dict)
    for i in range(10**7):
        if time.monotonic() >= until:
            return
        tenant, user = rng.choice(TENANTS), rng.choice(USERS)
        own = mine[(tenant, user)]
        roll = rng.random()
        if roll < 0.35 and len(own) < MAX_OWN:
            content = f"thread {n} memory {i} {uuid.uuid4().hex}"
            _, added = client.call(tenant, "memory.add", {"userId": user, "content": content})
            if added is None:
                continue
            tally.added[added["id"]] = (tenant, user, content)
            own[added["id"]] = content
            # Read your write, on whatever worker answers: found first by its own text.
            search = {"userId": user, "query": content, "threshold": 0.99, "limit": 1}
            _, hits = client.call(tenant, "memory.search", search)
            if hits is not None and [h["id"] for h in hits] != [added["id"]]:
                client.mismatch(f"search right after add of {added['id']} found {hits}")
        elif roll < 0.6 and own:
            memory_id = rng.choice(sorted(own))
            _, done = client.call(tenant, "memory.delete", {"id": memory_id})
            if done is None:
                continue
            tally.deleted.add(memory_id)
            content = own.pop(memory_id)
            status, _ = client.call(tenant, "memory.getById", {"id": memory_id}, ok=(404,))
            search = {"userId": user, "query": content, "threshold": 0.99, "limit": 5}
            _, hits = client.call(tenant, "memory.search", search)
            if hits is not None and memory_id in [h["id"] for h in hits]:
                client.mismatch(f"search right after delete of {memory_id} still finds it")
        elif roll < 0.8:
            _, listed = client.call(tenant, "memory.getAll", {"userId": user, "limit": 1000})
            if listed is None:
                continue
            ids = [m["id"] for m in listed]
            if len(ids) != len(set(ids)):
                client.mismatch(f"getAll of {tenant}/{user} lists an id twice")
            if not set(own) <= set(ids):
                client.mismatch(f"getAll of {tenant}/{user} lacks {set(own) - set(ids)}")
            if set(ids) & tally.deleted:
                client.mismatch(
                    f"getAll of {tenant}/{user} lists deleted {set(ids) & tally.deleted}"
                )
            if any(m["idpUserId"] != tenant or m["userId"] != user for m in listed):
                client.mismatch(f"getAll of {tenant}/{user} lists another user's memory")
        elif roll < 0.9 and own:
            memory_id = rng.choice(sorted(own))
            _, got = client.call(tenant, "memory.getById", {"id": memory_id})
            if got is not None and got["content"] != own[memory_id]:
                client.mismatch(f"getById {memory_id} answered {got}")
        else:
            search = {"userId": user, "query": f"anything {i}", "threshold": 0, "limit": 100}
            _, hits = client.call(tenant, "memory.search", search)
            if hits is not None and any(
                h["idpUserId"] != tenant or h["userId"] != user for h in hits
            ):
                client.mismatch(f"search of {tenant}/{user} found another user's memory")


def test_mixed_traffic_from_sixteen_threads_loses_nothing_and_never_fails(tmp_path):
    with FakeProvider(delay=0) as provider:
        server = start_server(tmp_path, **server_settings(provider))
        try:
            keys = {tenant: server.create_key(tenant, "load") for tenant in TENANTS}
            tallies = [Tally() for _ in range(THREADS)]
            until = time.monotonic() + SOAK_SECONDS
            started = time.monotonic()
            threads = [
                threading.Thread(
                    target=_traffic,
                    args=(n, server.url, keys, tallies[n], until, SOAK_SEED),
                    daemon=True,
                )
                for n in range(THREADS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(SOAK_SECONDS + 4 * REQUEST_TIMEOUT)
            assert not any(thread.is_alive() for thread in threads)
            elapsed = time.monotonic() - started
            final = Client(server.url, keys, Tally())
            listed = {
                (tenant, user): final.call(
                    tenant, "memory.getAll", {"userId": user, "limit": 1000}
                )[1]
                for tenant in TENANTS
                for user in USERS
            }
        finally:
            server.stop()

    errors = [e for tally in tallies for e in tally.errors] + final.tally.errors
    served = sum(tally.requests for tally in tallies)
    operations: collections.Counter = sum(
        (tally.by_operation for tally in tallies), collections.Counter()
    )
    figures.report(
        f"concurrency: {served} requests served in {elapsed:.1f}s by 4 workers to "
        f"{THREADS} threads ({served / elapsed:.0f}/s; seed {SOAK_SEED}), "
        f"{len(errors)} errors; " + ", ".join(f"{op} {n}" for op, n in sorted(operations.items()))
    )
    assert not errors, f"{len(errors)} bad answers, e.g. {errors[:5]}"

    added = {k: v for tally in tallies for k, v in tally.added.items()}
    deleted = set().union(*(tally.deleted for tally in tallies))
    assert len(added) == sum(len(tally.added) for tally in tallies), "one id acknowledged twice"
    assert deleted <= set(added)
    for (tenant, user), memories in listed.items():
        ids = [m["id"] for m in memories]
        assert len(ids) == len(set(ids)), f"{tenant}/{user}: an id listed twice"
        expected = {
            memory_id
            for memory_id, (t_, u, _) in added.items()
            if (t_, u) == (tenant, user) and memory_id not in deleted
        }
        assert set(ids) == expected, (
            f"{tenant}/{user}: lost {sorted(expected - set(ids))[:5]}, "
            f"unexpected {sorted(set(ids) - expected)[:5]}"
        )
        for m in memories:
            assert m["content"] == added[m["id"]][2]

    conn = connect(str(tmp_path / "memsvc.sqlite3"))
    try:
        (rows,) = conn.execute("SELECT count(*) FROM memories").fetchone()
        (vectors,) = conn.execute("SELECT count(*) FROM memory_vectors").fetchone()
    finally:
        conn.close()
    assert rows == vectors == len(added) - len(deleted)


def test_a_healthy_provider_never_makes_concurrent_calls_fail(tmp_path):
    """Concurrent searches against a provider that answers at once: none may be a 5xx."""
    with FakeProvider(delay=0.05) as provider:
        server = start_server(tmp_path, **server_settings(provider))
        try:
            key = server.create_key("tenant-a", "load")
            failures: list[tuple[int, str]] = []
            until = time.monotonic() + max(SOAK_SECONDS, 5)

            def search(n: int) -> None:
                session = requests.Session()
                for i in range(10**6):
                    if failures or time.monotonic() >= until:
                        return
                    resp = session.get(
                        server.trpc + "/memory.search",
                        params={"input": json.dumps({"userId": "u", "query": f"q {n} {i}"})},
                        headers={"x-api-key": key},
                        timeout=REQUEST_TIMEOUT,
                    )
                    if resp.status_code >= 500:
                        failures.append((resp.status_code, resp.text[:300]))

            threads = [threading.Thread(target=search, args=(n,)) for n in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(2 * REQUEST_TIMEOUT + SOAK_SECONDS)
        finally:
            server.stop()
    if failures:
        figures.report(f"concurrency: a healthy provider still gave {failures[0]}")
    assert not failures, failures[:3]
