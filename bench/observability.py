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

HTTP through wrk on a busy two-core box wobbles by far more than 3% from
one second to the next, so what the "on" server adds per request is also
timed alone, in-process (:func:`hooks_cost`: the middleware and every hook
a cached search calls, metrics in multiprocess mode, access lines written
to /dev/null), against "off" (gunicorn's access line instead) and against
a bare app writing no access line at all (the upper bound), and divided by
one HTTP search's own time in the same run (1 / req/s of the "off" server
at one connection).

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
import typing as t
import urllib.parse

import requests

from bench.http_search import lua_script
from bench.http_search import populate
from bench.http_search import queries
from bench.http_search import unlimited_key
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
            key = unlimited_key(server)
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
    bare_us, off_us, on_us = hooks_cost()

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
    http_us = 1e6 / statistics.median(o for o, _ in rows[levels[0]])
    print("per request, the middleware and hooks alone, in-process (best of 7 x 20,000):")
    print(f"  bare (no access line, no ids, no metrics) {bare_us:7.1f} us")
    print(f"  off (gunicorn's access line)              {off_us:7.1f} us")
    print(f"  on (ids, memsvc's access line, metrics)   {on_us:7.1f} us")
    print(f"one cached search over HTTP at {levels[0]} connection in this run: {http_us:.0f} us")
    print(
        f"  on vs off: {(on_us - off_us) / http_us:+.2%} of it; on vs bare: "
        f"{(on_us - bare_us) / http_us:+.2%} (target: at most 3%)"
    )


def hooks_cost(repeats: int = 7, n: int = 20_000) -> tuple[float, float, float]:
    """Microseconds per request: bare, as before (off) and with observability on.

    One request as memsvc serves a cached-query search, minus the search:
    the WSGI middleware (request id, context, access line to /dev/null)
    around an app that makes the same hook calls a search does (the call
    answered, searched, candidates ranked, a query cache hit), metrics in
    multiprocess mode as under gunicorn. Off: the same app and calls, no
    middleware, metrics off, and gunicorn's access line (what memsvc wrote
    before; the "on" server has none). Bare: neither access line. Best of
    ``repeats`` runs: the least disturbed.
    """
    import dataclasses
    import datetime
    import timeit
    import types

    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    from memsvc.observability import logs
    from memsvc.observability import metrics
    from memsvc.observability import requests as observe
    from memsvc.observability.requests import RequestMiddleware
    from memsvc.serving.config import ACCESS_LOG_FORMAT

    @dataclasses.dataclass
    class Key:
        id: str = "5c967517-e93b-47f1-813d-3c71c33651d0"

    @dataclasses.dataclass
    class Caller:
        tenant: str = "bench"
        key: Key = dataclasses.field(default_factory=Key)

    @dataclasses.dataclass
    class Call:
        path: str = "memory.search"
        caller: Caller = dataclasses.field(default_factory=Caller)

    call = Call()
    body = [b'{"result":{"data":[]}}']

    def app(environ: dict, start_response: t.Callable[..., t.Any]) -> list[bytes]:
        started = time.perf_counter()
        metrics.query_cache(1, 0)
        metrics.ranked(10)
        metrics.searched("semantic", True)
        observe.call_done(call, None, started)
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "22")])
        return body

    # As gunicorn hands a wrk request to the app.
    query = "input=" + "%7B%22userId%22%3A%22u%22%2C%22query%22%3A%22tea%22%7D"
    headers = [("HOST", "127.0.0.1:8000"), ("X-API-KEY", "sk_memsvc_" + "0" * 64)]
    environ = {
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.multithread": True,
        "wsgi.multiprocess": True, "wsgi.run_once": False, "wsgi.file_wrapper": None,
        "wsgi.input_terminated": True, "SERVER_SOFTWARE": "gunicorn/27.0.1",
        "REQUEST_METHOD": "GET", "QUERY_STRING": query, "RAW_URI": "/trpc/memory.search?" + query,
        "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_X_API_KEY": headers[1][1], "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "40000",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "PATH_INFO": "/trpc/memory.search",
        "SCRIPT_NAME": "",
    }  # fmt: skip
    # What memsvc wrote before: gunicorn's access line, in memsvc's format.
    cfg = Config()
    cfg.set("accesslog", os.devnull)
    cfg.set("access_log_format", ACCESS_LOG_FORMAT)
    gunicorn_log = Logger(cfg)
    resp = types.SimpleNamespace(
        status="200 OK", sent=22, headers=[("Content-Type", "application/json")]
    )
    req = types.SimpleNamespace(headers=headers)

    def before(environ: dict, start_response: t.Callable[..., t.Any]) -> list[bytes]:
        began = datetime.datetime.now()
        out = app(environ, start_response)
        gunicorn_log.access(resp, req, environ, datetime.datetime.now() - began)
        return out

    def start_response(status: str, headers: list, exc_info: t.Any = None) -> None:
        return None

    folder = metrics.prepare_multiprocess_dir()  # as under gunicorn
    try:
        metrics.setup(["memory.search"])
        counting = metrics._metrics
        with open(os.devnull, "w") as devnull:
            handler = logs.configure("text")
            handler.setStream(devnull)  # type: ignore[attr-defined]
            wrapped = RequestMiddleware(app)

            def run(serve: t.Callable[..., t.Any], on: bool) -> float:
                metrics._metrics = counting if on else None
                timer = timeit.Timer(lambda: serve(dict(environ), start_response))
                return min(timer.repeat(repeats, n)) / n * 1e6

            bare, off, on = run(app, False), run(before, False), run(wrapped, True)
            handler.setStream(sys.stderr)  # type: ignore[attr-defined]
    finally:
        metrics.remove_multiprocess_dir(folder)
    return bare, off, on


if __name__ == "__main__":
    with recording("observability"):
        main()
