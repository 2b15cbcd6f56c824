"""Extraction jobs survive SIGKILL of their workers: each is run to the end, and applied once.

The model is the fake chat server (tests/support/fake_llm.py) as a process
of its own, answering after 300 ms, so that model calls are in flight when
workers die. Real gunicorn (2 workers, each with its extraction thread)
serves one SQLite file or PostgreSQL database. A client ingests one
conversation with extraction per user ("I live in city N" for user uN),
sending each again with the same session and message id until it is
acknowledged (idempotent: nothing is stored twice), while the test
SIGKILLs a worker at a moment when model calls are in flight, or once the
master with every worker, and then starts gunicorn again. Leases are short
(MEMSVC_LLM_TIMEOUT_SECONDS 2 + MEMSVC_LLM_LEASE_MARGIN_SECONDS 2): a dead
worker's jobs are claimed again after 4 s.

Afterwards, once no job is queued or running (a bounded wait): every user
has exactly one job, `done`, whose facts are one fact added and nothing
unchanged (a job applied twice would have found its own fact: `unchanged`
1, or a second fact), and exactly one fact, the echo of their message; and
the model never had more than MEMSVC_LLM_CONCURRENCY (3) calls in flight
at once, all workers together, dead ones included.

``MEMSVC_SOAK_CYCLES`` sets the number of kill cycles (4 by default) and
``MEMSVC_SOAK_SEED`` the random moments and victims.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
import typing as t

import pytest
import requests

from tests.support import figures
from tests.support.fake_provider import FakeProvider
from tests.support.servers import REPO
from tests.support.servers import KillableServer

pytestmark = pytest.mark.e2e

# Read at import: the suite's autouse fixture clears MEMSVC_* before each test.
SOAK_CYCLES = max(2, int(os.environ.get("MEMSVC_SOAK_CYCLES", "4")))
SOAK_SEED = int(os.environ.get("MEMSVC_SOAK_SEED", str(random.SystemRandom().randrange(10**6))))
USERS = 60
CONCURRENCY = 3
REQUEST_TIMEOUT = 20.0
DRAIN_SECONDS = 180.0


class FakeModelProcess:
    """``python -m tests.support.fake_llm`` in a process of its own: it outlives every kill."""

    def __init__(self, delay_ms: int, log: pathlib.Path):
        # Requests cut off by a kill make its handlers print tracebacks: kept out of sight.
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.fake_llm", "--port", "0"]
                + ["--delay-ms", str(delay_ms)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()  # its first line: the URL, once listening
        assert self.url.startswith("http://"), self.url

    def stats(self) -> dict[str, int]:
        resp = requests.get(self.url.removesuffix("/v1") + "/stats", timeout=10)
        resp.raise_for_status()
        return resp.json()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _call(server: KillableServer, key: str, kind: str, name: str, body: dict[str, t.Any]) -> t.Any:
    """One tRPC call; raises requests.RequestException when it got no 200."""
    url = server.url
    if url is None:
        raise requests.ConnectionError("the server is down")
    headers = {"x-api-key": key}
    if kind == "query":
        resp = requests.get(
            f"{url}/trpc/{name}",
            params={"input": json.dumps(body)},
            headers=headers,
            timeout=REQUEST_TIMEOUT,
        )
    else:
        resp = requests.post(
            f"{url}/trpc/{name}",
            data=json.dumps(body),
            headers={**headers, "Content-Type": "application/json"},
            timeout=REQUEST_TIMEOUT,
        )
    if resp.status_code != 200:
        raise requests.HTTPError(f"{name}: {resp.status_code} {resp.text[:300]}", response=resp)
    return resp.json()["result"]["data"]


def _ingest_all(server, key, acked: dict[int, dict | None], tries: list[int], stop) -> None:
    """Each user's conversation, sent again (the same ids) until acknowledged."""
    for n in range(USERS):
        body = {
            "userId": f"u{n}",
            "sessionId": f"s{n}",
            "messages": [{"role": "user", "content": f"I live in city {n}", "id": f"m{n}"}],
            "extract": True,
        }
        while not stop.is_set():
            tries[0] += 1
            try:
                out = _call(server, key, "mutation", "memory.ingest", body)
            except requests.HTTPError as e:
                status = e.response.status_code if e.response is not None else 0
                # Refused by a worker as it went down or came up: nothing was stored.
                assert status in (502, 503), str(e)
                time.sleep(0.05)
                continue
            except requests.RequestException:
                time.sleep(0.05)  # killed in flight: stored or not, sent again
                continue
            # A retry of a stored conversation stores nothing and queues no job.
            acked[n] = out.get("job")
            break
        time.sleep(0.03)  # spread over the kills


def _kill_during_a_model_call(server: KillableServer, model: FakeModelProcess, rng, whole: bool):
    """SIGKILL a worker (or everything) while model calls are in flight, if any come soon."""
    end = time.monotonic() + 5
    while time.monotonic() < end and model.stats()["in_flight"] == 0:
        time.sleep(0.02)
    time.sleep(rng.uniform(0, 0.25))
    if whole:
        server.kill()
        server.start()
        return
    workers = server.workers()
    if workers:
        os.kill(rng.choice(workers), signal.SIGKILL)


def _jobs(server: KillableServer, key: str) -> list[dict[str, t.Any]]:
    jobs: list[dict[str, t.Any]] = []
    cursor = None
    while True:
        body: dict[str, t.Any] = {"limit": 1000}
        if cursor:
            body["cursor"] = cursor
        page = _call(server, key, "query", "memory.jobs", body)
        jobs += page
        if len(page) < 1000:
            return jobs
        cursor = page[-1]["id"]


def test_extraction_jobs_survive_sigkill_of_their_workers_and_are_applied_once(
    tmp_path, database, store_kind
):
    rng = random.Random(SOAK_SEED)
    whole_at = rng.randrange(SOAK_CYCLES)
    model = FakeModelProcess(delay_ms=300, log=tmp_path / "fake_llm.log")
    try:
        with FakeProvider(delay=0) as provider:
            server = KillableServer(
                tmp_path,
                WEB_CONCURRENCY="2",
                MEMSVC_DATABASE=database,
                MEMSVC_RATE_LIMIT_PER_MINUTE="0",
                MEMSVC_CONCURRENCY_LIMIT="0",
                MEMSVC_LLM_URL=model.url,
                MEMSVC_LLM_MODEL="test",
                MEMSVC_LLM_TIMEOUT_SECONDS="2",
                MEMSVC_LLM_LEASE_MARGIN_SECONDS="2",
                MEMSVC_LLM_CONCURRENCY=str(CONCURRENCY),
                MEMSVC_EXTRACT_BACKOFF_SECONDS="0.05",
                MEMSVC_EXTRACT_MAX_ATTEMPTS="100",
                **provider.settings,
            )
            key = server.cli("keys", "create", "tenant-jobs", "jobs")
            acked: dict[int, dict | None] = {}
            tries, stop = [0], threading.Event()
            client = threading.Thread(
                target=_ingest_all, args=(server, key, acked, tries, stop), daemon=True
            )
            started = time.monotonic()
            try:
                server.start()
                client.start()
                for cycle in range(SOAK_CYCLES):
                    time.sleep(rng.uniform(0.2, 1.0))
                    _kill_during_a_model_call(server, model, rng, whole=cycle == whole_at)
                client.join(DRAIN_SECONDS)
                assert not client.is_alive(), f"ingests not acknowledged: {USERS - len(acked)}"
                jobs = _drained(server, key)
                _check(server, key, acked, jobs)
            finally:
                stop.set()
                server.stop()
            elapsed = time.monotonic() - started
        stats = model.stats()
    finally:
        model.stop()

    assert stats["max_in_flight"] <= CONCURRENCY, stats
    attempts = sum(j["attempts"] for j in jobs)
    figures.report(
        f"extraction crash ({store_kind}): {SOAK_CYCLES} SIGKILL cycles (seed {SOAK_SEED}, "
        f"whole server at cycle {whole_at + 1}) in {elapsed:.1f}s: {len(acked)} ingests "
        f"acknowledged ({tries[0]} sent), {len(jobs)} jobs, all done, 0 applied twice, 0 stuck; "
        f"{attempts} claims, {stats['requests']} model calls, "
        f"max {stats['max_in_flight']} in flight (limit {CONCURRENCY})"
    )


def _drained(server: KillableServer, key: str) -> list[dict[str, t.Any]]:
    """Every job, once none is queued or running (or the wait is over)."""
    end = time.monotonic() + DRAIN_SECONDS
    while True:
        jobs = _jobs(server, key)
        pending = [j for j in jobs if j["status"] in ("queued", "running")]
        if not pending or time.monotonic() > end:
            assert not pending, f"{len(pending)} jobs never settled: {pending[:3]}"
            return jobs
        time.sleep(0.5)


def _check(
    server: KillableServer, key: str, acked: dict[int, dict | None], jobs: list[dict]
) -> None:
    assert len(acked) == USERS
    by_user: dict[str, list[dict]] = {}
    for job in jobs:
        by_user.setdefault(job["userId"], []).append(job)
    assert sorted(by_user) == sorted(f"u{n}" for n in range(USERS)), sorted(by_user)
    problems = []
    for n in range(USERS):
        user = f"u{n}"
        mine = by_user[user]
        if len(mine) != 1:
            problems.append(f"{user}: {len(mine)} jobs")
            continue
        [job] = mine
        if acked[n] is not None and acked[n]["id"] != job["id"]:
            problems.append(f"{user}: acknowledged job {acked[n]['id']} is not {job['id']}")
        if job["status"] != "done":
            problems.append(f"{user}: job {job['status']}: {job.get('error')}")
            continue
        facts = _call(server, key, "query", "memory.getAll", {"userId": user, "kinds": ["fact"]})
        if [f["content"] for f in facts] != [f"The user said: I live in city {n}"]:
            problems.append(f"{user}: facts {[f['content'] for f in facts]}")
        elif job["facts"] != {"added": [facts[0]["id"]], "superseded": [], "unchanged": 0}:
            problems.append(f"{user}: applied as {job['facts']}")
    assert not problems, f"{len(problems)} users wrong: {problems[:5]}"
