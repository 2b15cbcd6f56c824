"""What request ids, the access line and Prometheus metrics cost a cached-query search.

Two servers in the same run, each with the checked-in gunicorn settings
(2 workers here), each serving a user of 1,000 memories with the bundled
model and the query cache on, asked the same 500 questions over and over
(as in bench/http_search.py, "new, query cache on"):

- off: memsvc without request ids, its access line or metrics, and with
  gunicorn's own access line instead (what memsvc did before);
- on: request ids, memsvc's access line and metrics (MEMSVC_METRICS_TOKEN),
  as an operator would run it.

wrk drives each in turn, many short rounds alternating (which goes first
alternates too), so that both see the same noise of a shared machine; the
table gives the median ratio on/off of the rounds and the ratio of all
requests answered. The target: at most 3% slower.

HTTP through wrk on a busy two-core box wobbles by more than 3% from one
second to the next, so the same comparison is also made in-process, where
the noise is far smaller: the same app (same database, key and cached
queries) answering through Flask's test client with the middleware and
metrics on and off in turn, metrics in multiprocess mode as under gunicorn
and the access line written to /dev/null ("off" writes no access line at
all, so the figure is an upper bound). Its difference per request, over the
HTTP request's own time (1 / its req/s at one connection), is the cost.

    python -m bench.observability [--seconds 2] [--rounds 10] [--connections 1,4]

Needs wrk (Debian: apt-get install wrk).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
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
    parser.add_argument("--seconds", type=float, default=2)
    parser.add_argument("--rounds", type=int, default=10)
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
        for i in range(args.rounds):
            for c in levels:
                got = {}
                order = list(servers.items())
                for name, (server, _) in order if i % 2 == 0 else order[::-1]:
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
        for server, _ in servers.values():
            server.stop()
        db = servers["on"][0].env["MEMSVC_DATABASE"]
        inproc = in_process(db, servers["on"][1], paths, tmp)

    print(
        f"memory.search, cached queries (500 distinct, asked over and over), user with "
        f"{args.memories} memories; gunicorn 2 workers x 8 threads; wrk {args.seconds:g}s, "
        f"{args.rounds} rounds alternating off/on"
    )
    print("off: no request ids, gunicorn's access line, no metrics")
    print("on:  request ids, memsvc's access line, Prometheus metrics (multiprocess)")
    print(
        f"{'connections':>11}{'off req/s':>11}{'on req/s':>10}{'median on/off':>15}"
        f"{'all on/all off':>16}{'min':>7}{'max':>7}"
    )
    for c in levels:
        ratios = [on_rps / off for off, on_rps in rows[c]]
        off_all = sum(off for off, _ in rows[c])
        on_all = sum(on_rps for _, on_rps in rows[c])
        print(
            f"{c:>11}{statistics.median(o for o, _ in rows[c]):>11.0f}"
            f"{statistics.median(o for _, o in rows[c]):>10.0f}"
            f"{statistics.median(ratios):>15.3f}{on_all / off_all:>16.3f}"
            f"{min(ratios):>7.2f}{max(ratios):>7.2f}"
        )
    print(f"non-2xx answers: {bad}; searches the 'on' server counted: {counted:.0f}")
    print()
    off_us, on_us, pair = inproc
    http_us = 1e6 / statistics.median(o for o, _ in rows[levels[0]])
    print("in-process, same app, cached queries (median of rounds of 200 requests each):")
    print(f"  off: {off_us:8.1f} us per request")
    print(f"  on:  {on_us:8.1f} us per request (median paired ratio {pair:.3f})")
    print(
        f"  cost: {on_us - off_us:+.1f} us per request = {(on_us - off_us) / http_us:+.2%} of "
        f"one HTTP search at {levels[0]} connection ({http_us:.0f} us)"
    )


def in_process(
    db: str, key: str, paths: list[str], tmp: pathlib.Path
) -> tuple[float, float, float]:
    """Median microseconds per request with request ids, access line and metrics off and on."""
    from memsvc import create_app
    from memsvc.observability import logs
    from memsvc.observability import metrics
    from tests.support.servers import MODEL_CACHE

    folder = metrics.prepare_multiprocess_dir()  # as under gunicorn
    try:
        app = create_app(
            {
                "DATABASE": db,
                "LIMITS_DIR": str(tmp / "limits-inproc"),
                "MODEL_CACHE_DIR": MODEL_CACHE,
                "METRICS_TOKEN": TOKEN,
            }
        )
        with open(os.devnull, "w") as devnull:
            handler = logs.configure("text")
            handler.setStream(devnull)  # type: ignore[attr-defined]
            wrapped = app.wsgi_app
            plain = wrapped.app
            counting = metrics._metrics
            client = app.test_client()
            headers = {"x-api-key": key}

            def mode(on: bool) -> None:
                app.wsgi_app = wrapped if on else plain
                metrics._metrics = counting if on else None

            def one_round(start: int, n: int = 200) -> float:
                began = time.perf_counter()
                for i in range(start, start + n):
                    resp = client.get(paths[i % len(paths)], headers=headers)
                    assert resp.status_code == 200, resp.data
                return (time.perf_counter() - began) / n * 1e6

            for on in (False, True):  # every query in the cache, both ways
                mode(on)
                one_round(0, len(paths))
            off, on_, pairs = [], [], []
            for r in range(30):
                first = r % 2 == 0
                got = {}
                for on in (first, not first):
                    mode(on)
                    got[on] = one_round(r * 200)
                off.append(got[False])
                on_.append(got[True])
                pairs.append(got[True] / got[False])
            mode(True)
            handler.setStream(sys.stderr)  # type: ignore[attr-defined]
        app.extensions["memsvc"].close()
    finally:
        metrics.remove_multiprocess_dir(folder)
    return statistics.median(off), statistics.median(on_), statistics.median(pairs)


if __name__ == "__main__":
    with recording("observability"):
        main()
