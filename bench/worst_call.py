"""The costliest calls one can build within the documented limits, on both stores.

One gunicorn server on each store in turn (the checked-in config: 2
workers x 8 threads, the bundled int8 model, the query cache off), on the
machine with the client. A user of 500 memories, each with metadata of
60 KiB (within the 64 KiB limit, 30 levels deep), is stored first by a key
the operator gave room for it; then, one at a time, with a key at the
default limits, each call below, 3 times:

  getById               one memory (the baseline: the cheapest call; the
                        mean of 100 in a row)
  add, 800 windows      the longest Chinese text within the window budget
                        (800 windows, about 28,000 characters; charged 50)
  search, same text     the same text as a query (charged 50)
  getAll, 1000 of 60 KiB  the longest page of the largest memories: the
                        answer stops at MEMSVC_MAX_RESPONSE_BYTES (32 MiB)
  deleteAll             the 500 memories and their history at once

Printed for each: the wall time, the CPU the server's processes spent
(all workers and PostgreSQL's backends on the same box are counted, as
they share it), what the call was charged (calls against the key's
rate), and CPU per charged call; then the worst CPU per charged call as
a ratio to getById's, measured in the same run.

    python -m bench.worst_call [--stores sqlite,postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import tempfile
import time

import psutil
import requests

from bench.noisy_key import key_id
from bench.report import recording
from memsvc.embeddings.local import LocalEmbedder
from memsvc.embeddings.windows import needed
from tests.support import postgres
from tests.support import texts
from tests.support.servers import MODEL_CACHE
from tests.support.servers import Server
from tests.support.servers import start_server

MEMORIES = 500
ROUNDS = 3


def metadata(i: int) -> dict:
    """60 KiB as compact JSON, 30 levels deep."""
    inner: dict = {"leaf": "x" * (60 * 1024 - 400), "n": i}
    for depth in range(29):
        inner = {f"k{depth}": inner}
    return inner


def longest(embedder: LocalEmbedder, text: str, windows: int) -> str:
    """The longest start of ``text`` that needs at most ``windows`` embedding windows."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if needed(embedder, text[:mid]) <= windows:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def server_cpu(roots: list[int]) -> float:
    total = 0.0
    for pid in roots:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    cpu = p.cpu_times()
                    total += cpu.user + cpu.system
    return total


def call(server: Server, key: str, procedure: str, body: object, method: str) -> int:
    url = f"{server.trpc}/{procedure}"
    headers = {"x-api-key": key}
    if method == "GET":
        resp = requests.get(url, params={"input": json.dumps(body)}, headers=headers, timeout=300)
    else:
        resp = requests.post(
            url, data=json.dumps(body), headers={**headers, "Content-Type": "application/json"},
            timeout=300,
        )  # fmt: skip
    return resp.status_code


def fill(server: Server, key: str, user: str) -> str:
    first = ""
    for i in range(MEMORIES):
        body = {"userId": user, "content": f"memory {i} of a large user", "metadata": metadata(i)}
        resp = requests.post(
            f"{server.trpc}/memory.add", data=json.dumps(body),
            headers={"x-api-key": key, "Content-Type": "application/json"}, timeout=60,
        )  # fmt: skip
        assert resp.status_code == 200, resp.text[:200]
        first = first or resp.json()["result"]["data"]["id"]
    return first


def measure(store: str, server: Server, roots: list[int]) -> list[tuple]:
    loader = server.create_key("tenant-A", "loader")
    server.cli("keys", "set-limits", key_id(server, "loader"), "--per-minute", "0")
    # Its rate out of the way of the rounds (each call is still charged what it costs).
    key = server.create_key("tenant-A", "caller")
    server.cli("keys", "set-limits", key_id(server, "caller"), "--per-minute", "100000")
    embedder = LocalEmbedder(cache_dir=MODEL_CACHE)
    chinese = longest(embedder, texts.chinese(65_536), 800)
    add_units = -(-needed(embedder, chinese) // 16)
    search_units = -(-needed(embedder, chinese, query=True) // 16)
    ids = [fill(server, loader, f"big{r}") for r in range(ROUNDS)]
    rows = []
    for label, units, make in (
        ("getById", 1, lambda r: ("memory.getById", {"id": ids[r]}, "GET")),  # noqa: B023
        ("add, 800 windows", add_units,
         lambda r: ("memory.add", {"userId": "t", "content": chinese}, "POST")),
        ("search, same text", search_units,
         lambda r: ("memory.search", {"userId": "big0", "query": chinese}, "GET")),
        ("getAll, 1000 of 60 KiB", 1,
         lambda r: ("memory.getAll", {"userId": f"big{r}", "limit": 1000}, "GET")),
        ("deleteAll of 500", 1, lambda r: ("memory.deleteAll", {"userId": f"big{r}"}, "POST")),
    ):  # fmt: skip
        walls, cpus, statuses = [], [], []
        # The CPU clock ticks in 10 ms: a cheap call is timed as the mean of many.
        repeat = 100 if label == "getById" else 1
        for r in range(ROUNDS):
            procedure, body, method = make(r)
            before, started = server_cpu(roots), time.perf_counter()
            for _ in range(repeat):
                statuses.append(call(server, key, procedure, body, method))
            walls.append((time.perf_counter() - started) / repeat)
            cpus.append((server_cpu(roots) - before) / repeat)
        statuses = sorted(set(statuses)) if repeat > 1 else statuses
        wall, cpu = sorted(walls)[len(walls) // 2], sorted(cpus)[len(cpus) // 2]
        rows.append((store, label, statuses, wall, cpu, units))
        print(
            f"{store:9} {label:24} {','.join(map(str, statuses)):12} {wall * 1000:9.0f} "
            f"{cpu * 1000:9.0f} {units:7} {cpu / units * 1000:10.1f}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    print(
        f"one call at a time, medians of {ROUNDS}; gunicorn 2 workers x 8 threads, query cache off"
    )
    print("store     call                     statuses       wall ms    CPU ms charged CPU ms/call")
    for store in args.stores.split(","):
        with contextlib.ExitStack() as stack:
            directory = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            settings = {"MEMSVC_QUERY_CACHE_ENTRIES": "0"}
            roots: list[int] = []
            if store == "postgres":
                url = postgres.fresh_database("bench_worst_call")
                stack.callback(postgres.drop_database, url)
                settings["MEMSVC_DATABASE"] = url
                roots.append(postgres.server().get_pid())
            server = start_server(directory, **settings)
            stack.callback(server.stop)
            rows = measure(store, server, [server.proc.pid, *roots])
            base = rows[0][4]
            worst = max(rows[1:], key=lambda row: row[4] / row[5])
            print(
                f"{store}: the worst call per charged call is {worst[1]}, "
                f"{worst[4] / worst[5] * 1000:.0f} ms of CPU per charged call, "
                f"{worst[4] / worst[5] / base:.0f}x getById's; the worst call in all: "
                f"{max(row[4] for row in rows):.2f} s of CPU"
            )


if __name__ == "__main__":
    with recording("worst_call"):
        main()
