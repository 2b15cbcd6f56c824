"""Hostile calls against real gunicorn with the checked-in settings: a huge batch answer,
key farming, a key revoked mid-batch, a planted limiter folder, a disk that fills up.

Connection-level attacks (slow clients, endless request lines) are in test_hostile.py.
Each test is bounded in time and size; its figures are printed in the run's summary.
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

import pytest
import requests

from memsvc import limits
from tests.support import figures
from tests.support.fake_provider import FakeProvider
from tests.support.servers import REPO
from tests.support.servers import free_port
from tests.support.servers import server_env
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

MiB = 1 << 20


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    """A server with the checked-in settings and every default limit."""
    server = start_server(tmp_path_factory.mktemp("stock"))
    yield server
    server.stop()


def call(server, method, procedures, inputs, headers, batch=True, timeout=120):
    """A (batch) call; returns the response."""
    url = f"{server.trpc}/{procedures}" + ("?batch=1" if batch else "")
    if method == "GET":
        return requests.get(
            url, params={"input": json.dumps(inputs)}, headers=headers, timeout=timeout
        )
    return requests.post(
        url,
        data=json.dumps(inputs),
        headers={**headers, "Content-Type": "application/json"},
        timeout=timeout,
    )


def batch_of(procedure: str, inputs: list[dict]) -> tuple[str, dict]:
    return ",".join([procedure] * len(inputs)), {str(i): v for i, v in enumerate(inputs)}


def workers(server) -> list[int]:
    pid = server.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class PeakRss:
    """The most memory any worker of ``server`` held while the block ran, above its start."""

    def __init__(self, server):
        self.pids = workers(server)
        self.start = {pid: rss(pid) for pid in self.pids}
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            for pid in self.pids:
                self.peak = max(self.peak, rss(pid) - self.start[pid])
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- 2. one batch cannot build a reply of gigabytes ---------------------------------------


def test_a_batch_whose_answer_would_be_huge_gets_413_and_the_worker_stays_small(stock):
    key = {"x-api-key": stock.create_key("big-answers", "k")}
    # 40 memories with 60 KiB of metadata each (the most metadata allows), 15 per request
    # (the body limit is 1 MiB): about 2.5 MB of stored memories...
    padding = "p" * (60 * 1024)
    for start in range(0, 40, 15):
        adds = [
            {"userId": "u", "content": f"memory {i}", "metadata": {"pad": padding}}
            for i in range(start, min(start + 15, 40))
        ]
        resp = call(stock, "POST", *batch_of("memory.add", adds), key)
        assert resp.status_code == 200, resp.text[:300]
    # ...asked for 50 times in one batch (90 calls in all: within the rate limit): a
    # 123 MB answer without a budget.
    procedures, inputs = batch_of("memory.getAll", [{"userId": "u", "limit": 100}] * 50)
    with PeakRss(stock) as memory:
        started = time.monotonic()
        resp = call(stock, "GET", procedures, inputs, key)
        seconds = time.monotonic() - started
    assert resp.status_code == 207
    answers = resp.json()
    served = [a for a in answers if "result" in a]
    refused = [a for a in answers if "error" in a]
    assert len(served) + len(refused) == 50
    assert 1 <= len(served) <= 14, len(served)  # 32 MiB / ~2.5 MB per answer
    assert all(len(a["result"]["data"]) == 40 for a in served)
    assert all(a["error"]["code"] == "PAYLOAD_TOO_LARGE" for a in refused)
    assert "MEMSVC_MAX_RESPONSE_BYTES" in refused[0]["error"]["message"]
    assert len(resp.content) <= 32 * MiB + 64 * 1024
    assert memory.peak < 256 * MiB, memory.peak
    figures.report(
        f"hostile: 50 x getAll of 2.5 MB in one batch: {len(served)} served, "
        f"{len(refused)} refused 413, answer {len(resp.content) / MiB:.1f} MiB in "
        f"{seconds:.1f} s, worker peak +{memory.peak / MiB:.0f} MiB"
    )


# -- 5. limits cannot be multiplied by farming keys ----------------------------------------


def test_a_tenant_cannot_farm_keys_nor_hammer_the_keys_router(stock):
    token = {"Authorization": f"Bearer {stock.token('farmer')}"}
    creates = [{"name": f"farmed {i}"} for i in range(30)]
    resp = call(stock, "POST", *batch_of("keys.create", creates), token)
    answers = resp.json()
    made = [a for a in answers if "result" in a]
    forbidden = [a for a in answers if "error" in a]
    assert len(made) == 25  # MEMSVC_MAX_KEYS_PER_TENANT
    assert {a["error"]["code"] for a in forbidden} == {"FORBIDDEN"}
    # Those 30 calls were the tenant's 30 key operations for this minute.
    listed = call(stock, "GET", "keys.list", None, token, batch=False)
    assert listed.status_code == 429
    assert int(listed.headers["Retry-After"]) > 0
    # Other tenants are not affected.
    other = {"Authorization": f"Bearer {stock.token('bystander')}"}
    assert call(stock, "GET", "keys.list", None, other, batch=False).status_code == 200
    figures.report(
        f"hostile: 30 keys.create in one batch: {len(made)} made, {len(forbidden)} refused "
        "403; the next key operation 429"
    )


# -- 6. a revoked key stops within its batch -------------------------------------------------


def test_a_key_revoked_during_its_batch_stops_at_the_next_call(tmp_path):
    with FakeProvider(delay=1.0) as provider:
        server = start_server(tmp_path, MEMSVC_RATE_LIMIT_PER_MINUTE="0", **provider.settings)
        try:
            secret = server.create_key("acme", "leaked")
            reader = {"x-api-key": server.create_key("acme", "reader")}
            (leaked,) = [
                k
                for k in call(
                    server,
                    "GET",
                    "keys.list",
                    None,
                    {"Authorization": f"Bearer {server.token('acme')}"},
                    batch=False,
                ).json()["result"]["data"]
                if k["name"] == "leaked"
            ]
            adds = [{"userId": "u", "content": f"slow add {i}"} for i in range(10)]
            result: dict = {}

            def batch() -> None:
                result["resp"] = call(
                    server, "POST", *batch_of("memory.add", adds), {"x-api-key": secret}
                )

            attacker = threading.Thread(target=batch)
            attacker.start()
            time.sleep(3.2)  # about three adds in
            revoked = call(
                server,
                "POST",
                "keys.revoke",
                {"id": leaked["id"]},
                {"Authorization": f"Bearer {server.token('acme')}"},
                batch=False,
            )
            assert revoked.status_code == 200
            revoked_at = time.monotonic()
            revoked_wall_ms = time.time() * 1000
            attacker.join(60)
            answers = result["resp"].json()
            done = [a for a in answers if "result" in a]
            refused = [a for a in answers if "error" in a]
            assert {a["error"]["code"] for a in refused} == {"UNAUTHORIZED"}
            # The call running when the key was revoked finishes; none starts after.
            # (Counted by when each was stored, not by how many fit in 3.2 s: on
            # a busy machine the revocation itself may take seconds.)
            assert len(done) >= 2, len(done)
            assert len(done) + len(refused) == len(adds)
            stored_after = [
                a for a in done if _epoch_ms(a["result"]["data"]["createdAt"]) > revoked_wall_ms
            ]
            assert len(stored_after) <= 1, stored_after
            stored = call(server, "GET", "memory.getAll", {"userId": "u"}, reader, batch=False)
            assert len(stored.json()["result"]["data"]) == len(done)
            assert time.monotonic() - revoked_at < 3
            figures.report(
                f"hostile: key revoked 3.2 s into a batch of 10 slow adds: {len(done)} done, "
                f"{len(refused)} refused 401 (before: 9 created after revocation)"
            )
        finally:
            server.stop()


# -- 4. a planted limiter folder -------------------------------------------------------------


def start_and_fail(env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "wsgi:app"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_a_planted_limiter_folder_is_refused_at_start_up(tmp_path):
    # The default folder's name is predictable: someone else creates it first.
    db = tmp_path / "memsvc.sqlite3"
    env = server_env(db, free_port())
    del env["MEMSVC_LIMITS_DIR"]  # the default folder, named after the database
    subprocess.run([sys.executable, "-m", "memsvc.cli", "init-db"], cwd=REPO, env=env, check=True)
    planted = limits.default_directory(str(db), str(tmp_path))
    shutil.rmtree(planted, ignore_errors=True)  # a stale one of a database gone before
    os.mkdir(planted, 0o777)
    os.chmod(planted, 0o777)
    try:
        line = start_and_fail(env)
        assert "can be used by other users (mode 777)" in line and planted in line, line
    finally:
        os.rmdir(planted)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    line = start_and_fail({**env, "MEMSVC_LIMITS_DIR": str(link)})
    assert "not a folder" in line, line


# -- 8. a disk that fills up --------------------------------------------------------------


def test_a_full_disk_is_reported_and_nothing_acknowledged_is_lost(tmp_path):
    """The workers may write no file past a size (RLIMIT_FSIZE, which binds root too): the
    database meets a full disk for real; then the limit is lifted, as space returns.
    (Python ignores SIGXFSZ, so a write past the limit fails instead of killing.)"""
    server = start_server(tmp_path, MEMSVC_RATE_LIMIT_PER_MINUTE="0")
    try:
        key = {"x-api-key": server.create_key("acme", "k")}
        first = call(server, "POST", "memory.add", {"userId": "u", "content": "first"}, key, False)
        assert first.status_code == 200
        db = tmp_path / "memsvc.sqlite3"
        wal = tmp_path / "memsvc.sqlite3-wal"
        limit = max(db.stat().st_size, wal.stat().st_size if wal.exists() else 0) + MiB
        processes = [server.proc.pid, *workers(server)]
        for pid in processes:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        acknowledged, failures = ["first"], []
        text = "a long memory to fill the disk " * 600
        for i in range(60):
            content = f"{i} {text}"
            resp = call(
                server, "POST", "memory.add", {"userId": "u", "content": content}, key, False
            )
            if resp.status_code == 200:
                acknowledged.append(content)
            else:
                failures.append(resp)
                if len(failures) == 3:
                    break
        assert failures, "the disk never filled up"
        for resp in failures:
            error = resp.json()["error"]
            assert resp.status_code == 503 and error["code"] == "SERVICE_UNAVAILABLE"
            assert error["message"].startswith("Storage unavailable: the disk"), error
        health = requests.get(server.url + "/health", timeout=10)
        assert health.status_code == 503 and health.json()["detail"].startswith("the disk")
        # Reads go on, with everything acknowledged.
        listed = call(server, "GET", "memory.getAll", {"userId": "u"}, key, False)
        assert listed.status_code == 200
        assert {m["content"] for m in listed.json()["result"]["data"]} == set(acknowledged)
        # Space returns: writes work again, nothing acknowledged is missing.
        for pid in processes:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        again = call(server, "POST", "memory.add", {"userId": "u", "content": "again"}, key, False)
        assert again.status_code == 200
        deadline = time.monotonic() + 40
        while requests.get(server.url + "/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "health never recovered"
            time.sleep(0.5)
        listed = call(server, "GET", "memory.getAll", {"userId": "u", "limit": 1000}, key, False)
        contents = {m["content"] for m in listed.json()["result"]["data"]}
        assert contents == {*acknowledged, "again"}
        figures.report(
            f"hostile: disk full after {len(acknowledged)} adds: writes 503 'Storage "
            f"unavailable', /health 503, reads 200; after space returned all "
            f"{len(acknowledged) + 1} acknowledged memories present"
        )
    finally:
        server.stop()


def _epoch_ms(timestamp: str) -> float:
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000
