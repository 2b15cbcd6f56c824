"""memory.search over HTTP under gunicorn: the old and new local forward, and a bare endpoint.

Every server runs with the checked-in gunicorn settings (2 workers here,
each with the default MEMSVC_THREADS). memsvc serves a user holding 1,000 memories with the bundled
local model, three times: its float32 numpy forward (the old one,
MEMSVC_LOCAL_BACKEND=numpy), its int8 ONNX Runtime forward (the new one),
both with the query cache off so that every search embeds its query, and
the new one with the query cache on (the default) answering the same 500
questions over and over, as agents ask them. Its key has limits high
enough never to refuse, so every call still goes through the limiter. The
bare app (bare_app.py) answers the same URL with a constant body. wrk drives
each at several concurrency levels with varied queries; the table gives
throughput, p50 and ratios to the old forward and to the bare endpoint.

Then, in-process, where one search's time goes now: wire and Flask, key
check, limits, embedding, and the store/cache search.

    python -m bench.http_search [--seconds 5] [--levels 1,4,16]

Needs wrk (Debian: apt-get install wrk).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import typing as t
import urllib.parse
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


from bench.report import recording  # noqa: E402
from memsvc.store import connect  # noqa: E402
from tests.support.servers import start_server  # noqa: E402

TOPICS = [
    "tea",
    "trains",
    "cats",
    "jazz",
    "hiking",
    "python",
    "gardening",
    "chess",
    "sushi",
    "rain",
]


def memories(n: int) -> list[str]:
    return [
        f"The user mentioned {TOPICS[i % len(TOPICS)]} in conversation number {i}, "
        f"and it matters to them for reason {i * 7 % 13}."
        for i in range(n)
    ]


def queries(n: int) -> list[str]:
    return [f"What does the user think about {TOPICS[i % len(TOPICS)]}? ({i})" for i in range(n)]


def wrk(url: str, lua: str, connections: int, seconds: float) -> tuple[float, float, int]:
    threads = min(2, connections)
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            lua,
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    value, unit = float(p50.group(1)), p50.group(2)
    p50_ms = value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, p50_ms, int(bad.group(1)) if bad else 0


def lua_script(path: pathlib.Path, key: str, paths: list[str]) -> str:
    body = "local paths = {" + ",".join(json.dumps(p) for p in paths) + "}\n"
    body += "local i = 0\n"
    body += "request = function()\n  i = i + 1\n"
    body += "  return wrk.format('GET', paths[(i % #paths) + 1], "
    body += "{['x-api-key'] = " + json.dumps(key) + "})\nend\n"
    path.write_text(body)
    return str(path)


def unlimited_key(server) -> str:
    """A new key of tenant ``bench`` whose limits never refuse a benchmark's calls.

    Every call still goes through the limiter.
    """
    key = server.create_key("bench", "bench")
    key_id = next(
        line.split()[0]
        for line in server.cli("keys", "list").stdout.splitlines()
        if " bench " in line
    )
    server.cli("keys", "set-limits", key_id, "--per-minute", "100000", "--concurrent", "1000")
    return key


def populate(db_path: str, n: int) -> None:
    import numpy as np

    from memsvc.embeddings.local import LocalEmbedder
    from memsvc.models import Memory
    from memsvc.store import SqliteStore
    from memsvc.store import connect

    texts = memories(n)
    vectors = LocalEmbedder().embed(texts)
    store = SqliteStore(connect(db_path))
    now = int(time.time() * 1000)
    with store.write():
        store.insert_memories(
            [
                Memory(str(uuid.uuid4()), "bench", "u", t, {}, now + i, now + i)
                for i, t in enumerate(texts)
            ],
            np.asarray(vectors),
        )
    store.conn.close()


class _Stages:
    """Time spent in named functions during one request, each wrapped in place."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.undo: list[t.Callable[[], None]] = []

    def wrap(self, stage: str, owner: t.Any, name: str) -> None:
        original = getattr(owner, name)
        spent = self.spent

        def timed(*args: t.Any, **kwargs: t.Any) -> t.Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[stage] = spent.get(stage, 0.0) + time.perf_counter() - started

        # A frozen dataclass's instance (a middleware) refuses setattr.
        put = setattr if isinstance(owner, (type, types.ModuleType)) else object.__setattr__
        put(owner, name, timed)
        self.undo.append(lambda: put(owner, name, original))

    def restore(self) -> None:
        while self.undo:
            self.undo.pop()()


def breakdown(db_path: str, key: str, tmp: str) -> list[tuple[str, float]]:
    """Median time of each stage of one cached-query search, in-process, inside whole requests.

    Each stage's functions are wrapped with a timer and the requests run
    as gunicorn would hand them over; a stage's time is what it took
    within the request, not on its own in a tight loop (where its data
    stays in the CPU's caches and it looks cheaper than it is).
    """
    import statistics

    from marshmallow import Schema
    from werkzeug.test import EnvironBuilder

    from bench.bare_app import app as bare_app
    from memsvc import create_app
    from memsvc.api import middleware
    from memsvc.api import procedures
    from memsvc.api import trpc
    from memsvc.limits import Limiter
    from memsvc.observability import access_log
    from memsvc.observability import logs
    from memsvc.services import memories as memory_service

    app = create_app({"DATABASE": db_path, "LIMITS_DIR": os.path.join(tmp, "limits-inproc")})
    # Log lines to a file, as gunicorn's error log is, not to this terminal.
    log_file = open(os.path.join(tmp, "inproc.log"), "a")  # noqa: SIM115 (open for the run)
    logs.configure(app.config["LOG_FORMAT"]).setStream(log_file)
    inputs = [json.dumps({"userId": "u", "query": q, "threshold": 0}) for q in queries(200)]
    # Each request as gunicorn hands it over: a WSGI environ, no test client.
    environs = [
        EnvironBuilder(
            path="/trpc/memory.search",
            query_string="input=" + urllib.parse.quote(i),
            headers={"x-api-key": key},
        ).get_environ()
        for i in inputs
    ]

    def call(wsgi_app: t.Any, environ: dict[str, t.Any]) -> bytes:
        statuses = []

        def start_response(status, headers, exc_info=None):
            statuses.append(status)

        body = b"".join(wsgi_app(dict(environ), start_response))
        assert statuses[0].startswith("200"), body
        return body

    def timings(wsgi_app: t.Any, stages: _Stages | None, reps: int = 600) -> list[float]:
        for environ in environs:
            call(wsgi_app, environ)  # warm: every query embedded and cached
        wholes = []
        for i in range(reps):
            if stages is not None:
                stages.spent.clear()
            started = time.perf_counter()
            call(wsgi_app, environs[i % len(environs)])
            wholes.append(time.perf_counter() - started)
            if stages is not None:
                for name, seconds in stages.spent.items():
                    per_stage.setdefault(name, []).append(seconds)
        return wholes

    per_stage: dict[str, list[float]] = {}
    total = statistics.median(timings(app, None)) * 1000
    bare = statistics.median(timings(bare_app, None)) * 1000
    stages = _Stages()
    names = [
        ("API key check", middleware, "_verify_api_key"),
        ("limits (acquire + release)", Limiter, "acquire"),
        ("limits (acquire + release)", Limiter, "release"),
        ("lastUsedAt (within its resolution)", middleware.record_use, "before"),
        ("input: JSON and validation", trpc._Inputs, "get"),
        ("input: JSON and validation", Schema, "load"),
        ("query embedding (cached)", memory_service, "query_vector"),
        ("search: scan, rank, rows", memory_service, "search_memories"),
        ("answer: shaping and JSON", procedures.Output, "encode"),
        ("answer: shaping and JSON", trpc, "_text_response"),
        ("access line", access_log, "write"),
    ]
    for stage, owner, name in names:
        stages.wrap(stage, owner, name)
    try:
        timings(app, stages)
    finally:
        stages.restore()
    found = [
        (stage, statistics.median(per_stage.get(stage, [0.0])) * 1000)
        for stage in dict.fromkeys(stage for stage, _, _ in names)
    ]
    rest = total - bare - sum(ms for _, ms in found)
    return [
        ("whole request (WSGI call)", total),
        ("the bare app's whole request", bare),
        *found,
        ("the rest: Flask beyond bare, tRPC glue", rest),
    ]


SERVERS = [
    ("old: numpy forward", {"MEMSVC_LOCAL_BACKEND": "numpy", "MEMSVC_QUERY_CACHE_ENTRIES": "0"}),
    ("new: int8 ONNX forward", {"MEMSVC_QUERY_CACHE_ENTRIES": "0"}),
    ("new, query cache on", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument("--memories", type=int, default=1000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("needs wrk: apt-get install wrk")
    levels = [int(x) for x in args.levels.split(",")]
    with contextlib.ExitStack() as stack:
        tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        servers = []
        for i, (name, settings) in enumerate(SERVERS):
            (tmp / str(i)).mkdir()
            server = start_server(tmp / str(i), **settings)
            stack.callback(server.stop)
            key = unlimited_key(server)
            populate(server.env["MEMSVC_DATABASE"], args.memories)
            servers.append((name, server, key))
        (tmp / "bare").mkdir()
        bare = start_server(tmp / "bare", app="bench.bare_app:app", ready="/trpc/memory.search")
        stack.callback(bare.stop)

        paths = [
            "/trpc/memory.search?input="
            + urllib.parse.quote(json.dumps({"userId": "u", "query": q, "threshold": 0}))
            for q in queries(500)
        ]
        luas = {
            name: lua_script(tmp / f"{i}.lua", key, paths)
            for i, (name, _, key) in enumerate(servers)
        }
        cached_name, cached, cached_key = servers[2]
        ids = [
            row[0]
            for row in connect(cached.env["MEMSVC_DATABASE"]).execute(
                "SELECT id FROM memories ORDER BY seq LIMIT 200"
            )
        ]
        get_lua = lua_script(
            tmp / "get.lua",
            cached_key,
            [
                "/trpc/memory.getById?input="
                + urllib.parse.quote(json.dumps({"userId": "u", "id": memory_id}))
                for memory_id in ids
            ],
        )
        # Warm each: model loaded, connections open; the query-cache server
        # until both workers have seen every query several times.
        for name, server, _ in servers:
            wrk(server.url, luas[name], 8, 8 if server is cached else 2)
        wrk(cached.url, get_lua, 4, 1)
        wrk(bare.url, luas[servers[0][0]], 4, 1)
        results: dict[tuple[str, int], tuple[float, float, int]] = {}
        for c in levels:
            for name, server, _ in servers:
                results[(name, c)] = wrk(server.url, luas[name], c, args.seconds)
            results[("bare", c)] = wrk(bare.url, luas[servers[0][0]], c, args.seconds)
            results[("getById", c)] = wrk(cached.url, get_lua, c, args.seconds)
            results[("bare getById", c)] = wrk(bare.url, get_lua, c, args.seconds)
        stages = breakdown(cached.env["MEMSVC_DATABASE"], cached_key, str(tmp))

    from memsvc.settings import SETTINGS

    workers = cached.env["WEB_CONCURRENCY"]
    threads = cached.env.get(
        "MEMSVC_THREADS", next(str(s.default) for s in SETTINGS if s.name == "THREADS")
    )
    print(
        f"memory.search, user with {args.memories} memories, bundled model; gunicorn "
        f"{workers} workers x {threads} threads; wrk {args.seconds:g}s per level, "
        "500 distinct queries"
    )
    print(
        f"{'server':<26}{'connections':>12}{'req/s':>9}{'p50 ms':>9}{'x old':>8}"
        f"{'x bare':>8}{'non-2xx':>9}"
    )
    for c in levels:
        old = results[(servers[0][0], c)][0]
        bare_rps = results[("bare", c)][0]
        for name in [n for n, _, _ in servers] + ["bare"]:
            rps, p50, bad = results[(name, c)]
            print(
                f"{name:<26}{c:>12}{rps:>9.0f}{p50:>9.1f}{rps / old:>8.2f}"
                f"{rps / bare_rps:>8.2f}{bad:>9}"
            )
    print()
    print("memory.getById (200 ids), query-cache server against the bare app")
    print(f"{'server':<26}{'connections':>12}{'req/s':>9}{'p50 ms':>9}{'x bare':>8}{'non-2xx':>9}")
    for c in levels:
        bare_rps = results[("bare getById", c)][0]
        for name in ("getById", "bare getById"):
            rps, p50, bad = results[(name, c)]
            print(f"{name:<26}{c:>12}{rps:>9.0f}{p50:>9.1f}{rps / bare_rps:>8.2f}{bad:>9}")
    one = levels[0]
    print()
    print(
        f"at {one} connection(s): cached-query search "
        f"{results[(cached_name, one)][0] / results[('bare', one)][0]:.2f}x the bare app, "
        f"getById {results[('getById', one)][0] / results[('bare getById', one)][0]:.2f}x"
    )
    print()
    print("where one cached-query search's time goes (in-process medians):")
    total = stages[0][1]
    for name, ms in stages:
        print(f"  {name:<44}{ms:>8.3f} ms{ms / total:>7.0%}")


if __name__ == "__main__":
    with recording("http_search"):
        main()
