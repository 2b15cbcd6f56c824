"""Acknowledged memories survive SIGKILL of the whole server, and nothing is half-written.

Client threads add memories (each with unique content) as fast as they can
while the test kills gunicorn's master and workers together, with SIGKILL,
at random moments, and restarts it on the same database. Afterwards every
add that was answered 200 is there and found by search, nothing exists that
was not sent, and the file is whole: every memory has its vector and every
vector its memory. Adds in flight at a kill may or may not exist; they are
counted as unknown.

``MEMSVC_SOAK_CYCLES`` sets the number of kill cycles (3 by default; the
soak run uses 20 or more) and ``MEMSVC_SOAK_SEED`` the random moments.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import random
import threading
import time
import typing as t
import uuid

import pytest
import requests
import urllib3

from memsvc.store import connect
from tests.support import figures
from tests.support.fake_provider import FakeProvider
from tests.support.servers import KillableServer

pytestmark = pytest.mark.e2e

# Read at import: the suite's autouse fixture clears MEMSVC_* before each test.
SOAK_CYCLES = int(os.environ.get("MEMSVC_SOAK_CYCLES", "3"))
SOAK_SEED = int(os.environ.get("MEMSVC_SOAK_SEED", str(random.SystemRandom().randrange(10**6))))
CLIENTS = 8
REQUEST_TIMEOUT = 20.0


@dataclasses.dataclass
class Ledger:
    """What the clients know: what was acknowledged, refused, never sent or lost in flight."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    #: content -> (user, id) of adds answered 200
    acked: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: adds whose request may have reached a server that was then killed
    unknown: set[str] = dataclasses.field(default_factory=set)
    #: adds whose connection was refused: the request never left
    never_sent: set[str] = dataclasses.field(default_factory=set)
    #: adds answered with an error: content -> (status, body)
    refused: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)


def _connection_refused(error: requests.ConnectionError) -> bool:
    reason = getattr(error.args[0], "reason", None) if error.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _client(n: int, server: KillableServer, key: str, ledger: Ledger, stop: threading.Event):
    user = f"user-{n % 4}"
    for i in range(10**7):
        if stop.is_set():
            return
        url = server.url
        if url is None:
            time.sleep(0.01)
            continue
        content = f"crash {n}-{i} {uuid.uuid4().hex}"
        try:
            resp = requests.post(
                url + "/trpc/memory.add",
                data=json.dumps({"userId": user, "content": content}),
                headers={"x-api-key": key, "Content-Type": "application/json"},
                timeout=REQUEST_TIMEOUT,
            )
        except requests.ConnectionError as e:
            with ledger.lock:
                (ledger.never_sent if _connection_refused(e) else ledger.unknown).add(content)
            time.sleep(0.01)
            continue
        except requests.RequestException:
            # A time-out, or an answer cut off by the kill (say, headers without
            # their body): the add may or may not have been committed.
            with ledger.lock:
                ledger.unknown.add(content)
            continue
        with ledger.lock:
            if resp.status_code == 200:
                ledger.acked[content] = (user, resp.json()["result"]["data"]["id"])
            else:
                ledger.refused[content] = (resp.status_code, resp.text[:300])


def _documented_refusal(status: int, body: str) -> bool:
    """An add refused with nothing stored, as the README allows under load."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return status == 503 and error["message"].startswith("embedding provider busy")


def test_acknowledged_adds_survive_sigkill_of_every_process_and_nothing_is_half_written(
    tmp_path,
):
    rng = random.Random(SOAK_SEED)
    with FakeProvider(delay=0) as provider:
        server = KillableServer(
            tmp_path,
            WEB_CONCURRENCY="4",
            MEMSVC_RATE_LIMIT_PER_MINUTE="0",
            MEMSVC_CONCURRENCY_LIMIT="0",
            **provider.settings,
        )
        key = server.cli("keys", "create", "tenant-crash", "crash")
        ledger, stop = Ledger(), threading.Event()
        clients = [
            threading.Thread(target=_client, args=(n, server, key, ledger, stop), daemon=True)
            for n in range(CLIENTS)
        ]
        started = time.monotonic()
        try:
            server.start()
            for thread in clients:
                thread.start()
            for _ in range(SOAK_CYCLES):
                time.sleep(rng.uniform(0.2, 1.5))
                server.kill()
                server.start()
            time.sleep(0.3)
            stop.set()
            for thread in clients:
                thread.join(REQUEST_TIMEOUT + 10)
            assert not any(thread.is_alive() for thread in clients)
            found = _check_through_http(server, key, ledger)
        finally:
            stop.set()
            server.stop()
        elapsed = time.monotonic() - started

    rows = _check_the_file(server.db, ledger)
    figures.report(
        f"crash safety: {SOAK_CYCLES} SIGKILL cycles (seed {SOAK_SEED}) in {elapsed:.1f}s: "
        f"{len(ledger.acked)} acknowledged, {found} found, {len(ledger.unknown)} unknown "
        f"(in flight at a kill; {rows - len(ledger.acked)} of them stored), "
        f"{len(ledger.never_sent)} never sent, {len(ledger.refused)} refused"
    )


def _check_through_http(server: KillableServer, key: str, ledger: Ledger) -> int:
    """Every acknowledged memory: there by id, and the first hit for its own text."""
    assert server.url is not None
    url = server.url
    unexpected = {c: r for c, r in ledger.refused.items() if not _documented_refusal(*r)}
    assert not unexpected, f"adds answered with an error: {list(unexpected.items())[:5]}"
    assert ledger.acked, "no add was ever acknowledged: the run proves nothing"

    def check(item: tuple[str, tuple[str, str]]) -> str | None:
        content, (user, memory_id) = item
        headers = {"x-api-key": key}
        got = requests.get(
            url + "/trpc/memory.getById",
            params={"input": json.dumps({"id": memory_id})},
            headers=headers,
            timeout=30,
        )
        if got.status_code != 200 or got.json()["result"]["data"]["content"] != content:
            return f"getById {memory_id}: {got.status_code} {got.text[:200]}"
        search = {"userId": user, "query": content, "threshold": 0.99, "limit": 3}
        found = requests.get(
            url + "/trpc/memory.search",
            params={"input": json.dumps(search)},
            headers=headers,
            timeout=30,
        )
        hits = found.json()["result"]["data"] if found.status_code == 200 else None
        if not hits or hits[0]["id"] != memory_id:
            return f"search for {content!r}: {found.status_code} {found.text[:300]}"
        return None

    # Three at a time: never more embedding calls on one worker than it lets wait on
    # the provider (EMBEDDING_MAX_CONCURRENCY), which would be refused as "busy".
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        problems = [p for p in pool.map(check, sorted(ledger.acked.items())) if p]
    assert not problems, f"{len(problems)} acknowledged memories missing: {problems[:5]}"
    return len(ledger.acked)


def _check_the_file(path: pathlib.Path, ledger: Ledger) -> int:
    """The database as SQLite sees it; returns how many memories it holds."""
    conn = connect(str(path))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT seq, id, user_id, content FROM memories").fetchall()
        vector_rowids = {r for (r,) in conn.execute("SELECT rowid FROM memory_vectors")}
        (vector_count,) = conn.execute("SELECT count(*) FROM memory_vectors").fetchone()
        counters = _user_counters(conn)
    finally:
        conn.close()

    # No half-written memory: a row without its vector, or a vector without its row.
    seqs = {seq for seq, _, _, _ in rows}
    assert len(rows) == vector_count
    assert seqs == vector_rowids, (sorted(seqs - vector_rowids)[:5], sorted(vector_rowids - seqs))

    stored = {content: (user, memory_id) for _, memory_id, user, content in rows}
    assert len(stored) == len(rows), "an add was stored twice"
    # Every acknowledged add, exactly as acknowledged.
    missing = {c: v for c, v in ledger.acked.items() if stored.get(c) != v}
    assert not missing, f"acknowledged but not stored: {list(missing.items())[:5]}"
    # Nothing that was not sent, refused, or is unaccounted for.
    stray = {
        content: "never sent" if content in ledger.never_sent else ledger.refused.get(content)
        for content in set(stored) - set(ledger.acked) - ledger.unknown
    }
    assert not stray, f"stored but never acknowledged nor in flight: {list(stray.items())[:5]}"

    if counters is not None:
        per_user: dict[str, int] = {}
        for user, _ in stored.values():
            per_user[user] = per_user.get(user, 0) + 1
        assert counters == per_user, "the per-user counters the search cache trusts drifted"
    return len(rows)


def _user_counters(conn: t.Any) -> dict[str, int] | None:
    """memory_users' count per user, where the schema has that table."""
    has = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'memory_users'"
    ).fetchone()[0]
    if not has:
        return None
    rows = conn.execute("SELECT user_id, count FROM memory_users WHERE count > 0").fetchall()
    return dict(rows)
