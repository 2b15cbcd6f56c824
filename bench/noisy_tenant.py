"""Another tenant's searches while one tenant uses every key it may hold at their limits.

One gunicorn server on each store in turn (the checked-in config: 2
workers x 8 threads; the bundled int8 model; the query cache off, so that
every search embeds its question): SQLite, then PostgreSQL (the tests'
private PostgreSQL 16, a fresh database).

Tenant B (its key's rate limit raised out of the way) searches one user's
50 memories with questions, one after another: first on the idle server
(the baseline), then while tenant A, with all the keys a tenant may hold
(MEMSVC_MAX_KEYS_PER_TENANT, 25) and the default limits (100 calls a
minute and 10 at once per key, 10 at once per tenant), sends from one
thread per key, each a call after another, memory.add and memory.search of
65,536 Chinese characters and of 65,536 characters of English prose
(bench/noisy_key.py's calls), waiting after a 429 as long as its
Retry-After says, as memsvc's clients do: A takes all its limits let it.
B searches from a process of its own, as another client would (in A's
process it would wait for the GIL behind A's threads). A's keys are made
through the API (``keys.create``), as a tenant makes them. When B's time is
up A stops sending, and the server is stopped with whatever A still waits
for after 30 s (A's long texts wait their turn: see MEMSVC_LONG_TEXTS_AT_ONCE).
Printed: B's p50 and p95, the ratio of B's p50 to its idle p50 on the
same server, measured in the same run, what A was answered, and how busy
the server's processes and A's client kept the machine's two cores.

    python -m bench.noisy_tenant [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import pathlib
import tempfile
import threading
import time
import typing as t
import urllib.parse

from bench.noisy_key import QUESTIONS
from bench.noisy_key import Answers
from bench.noisy_key import flood
from bench.noisy_key import key_id
from bench.noisy_key import pct
from bench.noisy_key import request
from bench.noisy_key import searches
from bench.noisy_key import send
from bench.postgres import own_cpu
from bench.postgres import tree_cpu
from bench.report import recording
from tests.support import postgres
from tests.support import texts
from tests.support.servers import Server
from tests.support.servers import start_server

KEYS = 25
#: How long A's calls under way when it stops may take to be answered
#: before the server is stopped with them (their answers are not needed).
DRAIN_SECONDS = 30


def _flood(server: Server, key: str, n: int, stop: threading.Event, answers: Answers) -> None:
    """A's ``n``-th thread (see :func:`bench.noisy_key.flood`), until the server goes."""
    try:
        flood(server, key, n, stop, answers, True)
    except (OSError, http.client.HTTPException):
        if not stop.is_set():
            raise  # the server is stopped once B is measured: only then may calls fail


class _TenantB:
    """B's searches (:func:`bench.noisy_key.searches`) from a process of its own.

    B is another client: in A's process its thread would wait for the GIL
    behind A's 25 (sending 590 kB URLs), and its latency would be A's client's.
    """

    def __init__(self, server: Server, key: str, seconds: float):
        context = multiprocessing.get_context("fork")
        self._answer, child = context.Pipe(duplex=False)
        self._go = context.Event()
        self._process = context.Process(
            target=self._run, args=(server, key, seconds, child), daemon=True
        )
        self._process.start()
        child.close()

    def _run(self, server: Server, key: str, seconds: float, answer: t.Any) -> None:
        self._go.wait()
        answer.send(searches(server, key, seconds))

    def latencies(self) -> list[float]:
        """Start, and B's latencies once its time is up."""
        self._go.set()
        latencies = self._answer.recv()
        self._process.join()
        return latencies


def measure(store: str, server: Server, seconds: float) -> float:
    """B's searches idle, then during A's flood: the ratio of the p50s."""

    b_key = server.create_key("tenant-B", "b")
    server.cli("keys", "set-limits", key_id(server, "b"), "--per-minute", "100000")
    parsed = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    # A's keys through the API, as a tenant makes them: a command each took
    # two seconds (a Python start), a minute for the 25.
    token = server.token("tenant-A")
    a_keys = []
    for i in range(KEYS):
        method, path, body, headers = request("POST", "/trpc/keys.create", "", {"name": f"a{i}"})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        assert resp.status == 200, answer
        a_keys.append(answer["result"]["data"]["secret"])
    for i in range(50):
        memory = texts.english(120, seed=100 + i)
        add = request("POST", "/trpc/memory.add", b_key, {"userId": "b", "content": memory})
        assert send(conn, add)[0] == 200
    conn.close()
    searches(server, b_key, 2)  # warm up
    base = 0.0
    for label, keys in (("none (idle)", []), (f"{KEYS} keys at their limits", a_keys)):
        stop, answers = threading.Event(), Answers()
        threads = [
            threading.Thread(target=_flood, args=(server, key, n, stop, answers), daemon=True)
            for n, key in enumerate(keys)
        ]
        tenant_b = _TenantB(server, b_key, seconds)  # forked before A's threads start
        before, client_before = tree_cpu([server.proc.pid]), own_cpu()
        for thread in threads:
            thread.start()
        latencies = tenant_b.latencies()
        cores = (tree_cpu([server.proc.pid]) - before) / seconds
        client = (own_cpu() - client_before) / seconds
        stop.set()
        stopped = time.monotonic()
        for thread in threads:
            thread.join(max(0.0, stopped + DRAIN_SECONDS - time.monotonic()))
        drain = time.monotonic() - stopped
        left = sum(thread.is_alive() for thread in threads)
        p50 = pct(latencies, 50)
        base = base or p50
        print(
            f"{store:10} {label:26} {len(latencies):8} {p50:8.1f} {pct(latencies, 95):8.1f} "
            f"{p50 / base:9.2f} {cores:7.2f} {client:7.2f}"
        )
        if threads:
            shown = ", ".join(f"{k}: {v}" for k, v in sorted(answers.counts.items()))
            print(f"{'':10} A's answers: {shown}")
            after = f"{left} still unanswered after" if left else "all answered within"
            print(f"{'':10} A's calls under way when it stopped: {after} {drain:.0f} s")
    return p50 / base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument(
        "--long-texts-at-once",
        type=int,
        help="MEMSVC_LONG_TEXTS_AT_ONCE (default: the server's, half the cores); "
        "2 on a 2-core box is one per worker, as before the machine's lane",
    )
    args = parser.parse_args()
    print(
        f"tenant B: one search at a time, 50 memories, {len(QUESTIONS)} questions, query cache "
        f"off; tenant A: {KEYS} keys, a thread each, 65,536-character add and search, default "
        f"limits, honouring Retry-After; {args.seconds:g} s a row; gunicorn 2 workers x 8 threads"
        + (
            f"; MEMSVC_LONG_TEXTS_AT_ONCE={args.long_texts_at_once}"
            if args.long_texts_at_once
            else ""
        )
    )
    print(f"{'cores busy':>84}")
    print(
        "store      A's calls                  searches   p50 ms   p95 ms  x idle p50  "
        "server  client"
    )
    started = time.monotonic()
    ratios = {}
    for store in args.stores.split(","):
        with contextlib.ExitStack() as stack:
            directory = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            settings = {"MEMSVC_QUERY_CACHE_ENTRIES": "0"}
            if args.long_texts_at_once:
                settings["MEMSVC_LONG_TEXTS_AT_ONCE"] = str(args.long_texts_at_once)
            if store == "postgres":
                url = postgres.fresh_database("bench_noisy_tenant")
                stack.callback(postgres.drop_database, url)
                settings["MEMSVC_DATABASE"] = url
            server = start_server(directory, **settings)
            stack.callback(server.stop)
            ratios[store] = measure(store, server, args.seconds)
    print(
        "\nB's p50 under A over B's idle p50: "
        + ", ".join(f"{store} {ratio:.2f}x" for store, ratio in ratios.items())
        + " (held to at most 2x)"
    )
    print(f"(the whole run took {(time.monotonic() - started) / 60:.1f} min)")


if __name__ == "__main__":
    with recording("noisy_tenant"):
        main()
