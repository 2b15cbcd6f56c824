"""Another key's searches while one key sends the longest texts at its full concurrency.

Two gunicorn servers in turn (the checked-in config: 2 workers x 8
threads; the bundled int8 model; the query cache off, so that every search
embeds its question), on one machine with the client:

  as before  MEMSVC_MAX_EMBEDDING_WINDOWS=0 and MEMSVC_RATE_LIMIT_WINDOWS_PER_CALL=0:
             no budget, every call counts as one
  now        the defaults: at most 800 windows a call, one call per 16 windows

On each, key B (its rate limit raised out of the way) searches one user's 50
memories with questions, one after another, for 20 s: first on the idle
server (the baseline), then while key A, with the default limits (100 calls
a minute, 10 at once), sends from 10 threads memory.add and memory.search of
65,536 Chinese characters and of 65,536 characters of English prose
(tests/support/texts.py), each thread a call after another. On the server
as before A sends back to back (nothing is refused). On the server now, in
turn: A waits after a 429 as long as its Retry-After says, as memsvc's
clients do; A sends back to back, ignoring 429s; and the same requests sent
back to back without a valid key (401), which any client can send: what
refusing large requests costs, whoever sends them. Printed: B's search
latency and its ratio to the idle baseline of the same server, what A was
answered, and how busy the server (its processes) and the client (this
process: B and A) kept the machine's two cores. A stops sending
at the end of its 20 s; the server then finishes the calls it was given
("drain").

    python -m bench.noisy_key [--seconds 20]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import pathlib
import tempfile
import threading
import time
import typing as t
import urllib.parse

from bench import load
from bench.postgres import own_cpu
from bench.postgres import tree_cpu
from bench.report import recording
from tests.support import texts
from tests.support.servers import Server
from tests.support.servers import start_server

CONFIGS = {
    "as before": {"MEMSVC_MAX_EMBEDDING_WINDOWS": "0", "MEMSVC_RATE_LIMIT_WINDOWS_PER_CALL": "0"},
    "now": {},
}
FLOOD_THREADS = 10
QUESTIONS = [
    f"What does the user {verb} {thing}?"
    for verb in ("like about", "think of", "know about", "plan for", "remember of")
    for thing in ("food", "travel", "work", "music", "sport", "family", "money", "health")
]


def key_id(server: Server, name: str) -> str:
    line = next(li for li in server.cli("keys", "list").stdout.splitlines() if f" {name} " in li)
    return line.split()[0]


def request(method: str, path: str, key: str, body: t.Any) -> tuple[str, str, bytes | None, dict]:
    """What to send for one call, encoded once: (method, path, body, headers)."""
    headers = {"x-api-key": key}
    if method == "GET":
        return method, path + "?input=" + urllib.parse.quote(json.dumps(body)), None, headers
    headers["Content-Type"] = "application/json"
    return method, path, json.dumps(body).encode(), headers


def send(
    conn: http.client.HTTPConnection, encoded: tuple[str, str, bytes | None, dict]
) -> tuple[int, float]:
    """Status and Retry-After (0 without one) of one call."""
    method, path, body, headers = encoded
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    return resp.status, float(resp.headers.get("Retry-After") or 0)


def searches(server: Server, key: str, seconds: float) -> list[float]:
    """B's search latencies, one search after another for ``seconds``."""
    result = load.run(
        server.url,
        lambda i, _: load.get(
            "/trpc/memory.search",
            {"userId": "b", "query": QUESTIONS[i % len(QUESTIONS)], "threshold": 0},
            {"x-api-key": key},
        ),
        threads=1,
        seconds=seconds,
    )
    assert result.errors == 0, f"{result.errors} of B's searches failed"
    return result.latencies


class Answers:
    """How A's calls were answered, by procedure and status, counted from every thread."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def add(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1


def flood(
    server: Server, key: str, n: int, stop: threading.Event, answers: Answers, patient: bool
) -> None:
    """A's calls from its ``n``-th thread, back to back, until ``stop``.

    ``patient``: after a 429, wait as long as Retry-After says, as memsvc's
    clients do; else send the next call at once.
    """
    chinese, english = texts.chinese(65_536), texts.english(65_536)
    # Encoded once: the client shares the machine, and must not compete
    # with the server more than sending takes.
    calls = [
        request("POST", "/trpc/memory.add", key, {"userId": "a", "content": chinese}),
        request("GET", "/trpc/memory.search", key, {"userId": "a", "query": chinese}),
        request("POST", "/trpc/memory.add", key, {"userId": "a", "content": english}),
        request("GET", "/trpc/memory.search", key, {"userId": "a", "query": english}),
    ]
    parsed = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
    i = n
    while not stop.is_set():
        encoded = calls[i % len(calls)]
        i += 1
        try:
            status, retry_after = send(conn, encoded)
        except (OSError, http.client.HTTPException):
            # The server closes a connection after refusing a body it did not
            # read (a 401 or 429 before the input is read): a new one, and again.
            conn.close()
            conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
            status, retry_after = send(conn, encoded)
        procedure = encoded[1].split("?")[0].rsplit(".", 1)[1]
        answers.add(f"{procedure} {status}")
        if patient and status == 429:
            stop.wait(retry_after)
    conn.close()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def measure(name: str, server: Server, floods: list[tuple[str, str, bool]], seconds: float) -> None:
    """B's searches on the idle server, then during each of ``floods`` (label, A's key, patient)."""
    b_key = server.create_key("tenant-B", "b")
    server.cli("keys", "set-limits", key_id(server, "b"), "--per-minute", "100000")
    parsed = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    for i in range(50):
        memory = texts.english(120, seed=100 + i)
        add = request("POST", "/trpc/memory.add", b_key, {"userId": "b", "content": memory})
        assert send(conn, add)[0] == 200
    conn.close()
    searches(server, b_key, 2)  # warm up
    base = 0.0
    for label, a_key, patient in [("none (idle)", "", False), *floods]:
        stop, answers = threading.Event(), Answers()
        threads = [
            threading.Thread(target=flood, args=(server, a_key, n, stop, answers, patient))
            for n in range(FLOOD_THREADS if a_key else 0)
        ]
        before, client_before = tree_cpu([server.proc.pid]), own_cpu()
        for thread in threads:
            thread.start()
        latencies = searches(server, b_key, seconds)
        cores = (tree_cpu([server.proc.pid]) - before) / seconds
        client = (own_cpu() - client_before) / seconds
        stop.set()
        stopped = time.monotonic()
        for thread in threads:
            thread.join()
        drain = time.monotonic() - stopped
        base = base or pct(latencies, 50)
        print(
            f"{name:10} {label:28} {len(latencies):8} {pct(latencies, 50):8.1f} "
            f"{pct(latencies, 95):8.1f} {pct(latencies, 50) / base:9.2f} {cores:7.2f} {client:7.2f}"
        )
        if threads:
            shown = ", ".join(f"{k}: {v}" for k, v in sorted(answers.counts.items()))
            print(f"{'':10} A's answers: {shown}; drained {drain:.1f} s after A stopped")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    print(
        f"key B: one search at a time, 50 memories, {len(QUESTIONS)} questions, query cache off; "
        f"key A: {FLOOD_THREADS} threads of 65,536-character add and search (Chinese, English), "
        f"default limits; {args.seconds:g} s a row; gunicorn 2 workers x 8 threads"
    )
    print(f"{'cores busy':>84}")
    print(
        "server     A's calls                    searches   p50 ms   p95 ms  x idle p50  "
        "server  client"
    )
    started = time.monotonic()
    for name, settings in CONFIGS.items():
        with contextlib.ExitStack() as stack:
            directory = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            server = start_server(directory, MEMSVC_QUERY_CACHE_ENTRIES="0", **settings)
            stack.callback(server.stop)
            floods = [("back to back", server.create_key("tenant-A", "a"), False)]
            if name == "now":
                floods = [
                    ("honouring Retry-After", server.create_key("tenant-A", "a1"), True),
                    ("back to back", server.create_key("tenant-A", "a2"), False),
                    ("without a key, back to back", "sk_memsvc_" + "0" * 64, False),
                ]
            measure(name, server, floods, args.seconds)
    print(f"\n(the whole run took {(time.monotonic() - started) / 60:.1f} min)")


if __name__ == "__main__":
    with recording("noisy_key"):
        main()
