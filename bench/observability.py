"""What request ids, the access line and Prometheus metrics cost a cached-query search.

Two servers in the same run, each with the checked-in gunicorn settings
(2 workers here), each serving a user of 1,000 memories with the bundled
model and the query cache on, asked the same 500 questions over and over
(as in bench/http_search.py, "new, query cache on"):

- off: memsvc without request ids, its access line or metrics, and with
  gunicorn's own access line instead (what memsvc did before);
- on: request ids, memsvc's access line and metrics (MEMSVC_METRICS_TOKEN),
  as an operator would run it.

wrk drives each in turn, several rounds alternating, so that both see the
same noise of a shared machine; the table gives each round and the median
ratio on/off. The target: at most 3% slower.

    python -m bench.observability [--seconds 4] [--rounds 5] [--connections 1,4]

Needs wrk (Debian: apt-get install wrk).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import urllib.parse

import requests

from bench.http_search import lua_script
from bench.http_search import populate
from bench.http_search import queries
from bench.http_search import wrk
from bench.report import recording
from tests.support.servers import start_server

TOKEN = "bench-metrics-token-0123456789"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", default="1,4")
    parser.add_argument("--memories", type=int, default=1000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("needs wrk: apt-get install wrk")
    levels = [int(c) for c in args.connections.split(",")]
    variants = [
        ("off", {"app": "bench.plain_app:app", "GUNICORN_CMD_ARGS": "--access-logfile -"}),
        ("on", {"MEMSVC_METRICS_TOKEN": TOKEN}),
    ]
    with contextlib.ExitStack() as stack:
        tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        servers = {}
        for name, settings in variants:
            (tmp / name).mkdir()
            server = start_server(tmp / name, **settings)
            stack.callback(server.stop)
            key = server.create_key("bench", "bench")
            key_id = next(
                line.split()[0]
                for line in server.cli("keys", "list").stdout.splitlines()
                if " bench " in line
            )
            server.cli(
                "keys", "set-limits", key_id, "--per-minute", "100000", "--concurrent", "1000"
            )
            populate(server.env["MEMSVC_DATABASE"], args.memories)
            servers[name] = (server, key)
        paths = [
            "/trpc/memory.search?input="
            + urllib.parse.quote(json.dumps({"userId": "u", "query": q, "threshold": 0}))
            for q in queries(500)
        ]
        luas = {
            name: lua_script(tmp / f"{name}.lua", key, paths) for name, (_, key) in servers.items()
        }
        for name, (server, _) in servers.items():  # model loaded, every query cached
            wrk(server.url, luas[name], 4, 3)
        rows: dict[int, list[tuple[float, float]]] = {c: [] for c in levels}
        bad = 0
        for _ in range(args.rounds):
            for c in levels:
                got = {}
                for name, (server, _) in servers.items():
                    rps, _p50, non_2xx = wrk(server.url, luas[name], c, args.seconds)
                    got[name] = rps
                    bad += non_2xx
                rows[c].append((got["off"], got["on"]))
        on = servers["on"][0]
        scraped = requests.get(
            on.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        ).text
        counted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in scraped.splitlines()
            if line.startswith('memsvc_calls_total{code="OK",procedure="memory.search"}')
        )

    print(
        f"memory.search, cached queries (500 distinct, asked over and over), user with "
        f"{args.memories} memories; gunicorn 2 workers x 8 threads; wrk {args.seconds:g}s, "
        f"{args.rounds} rounds alternating off/on"
    )
    print("off: no request ids, gunicorn's access line, no metrics")
    print("on:  request ids, memsvc's access line, Prometheus metrics (multiprocess)")
    print(f"{'connections':>11}{'round':>7}{'off req/s':>11}{'on req/s':>10}{'on/off':>8}")
    for c in levels:
        for i, (off, on_rps) in enumerate(rows[c], 1):
            print(f"{c:>11}{i:>7}{off:>11.0f}{on_rps:>10.0f}{on_rps / off:>8.3f}")
    print()
    for c in levels:
        ratio = statistics.median(on_rps / off for off, on_rps in rows[c])
        print(f"connections {c}: median on/off {ratio:.3f} ({(1 - ratio) * 100:+.1f}% cost)")
    print(f"non-2xx answers: {bad}; searches the 'on' server counted: {counted:.0f}")


if __name__ == "__main__":
    with recording("observability"):
        main()
