"""memory.search over HTTP under gunicorn: the old and new local forward, and a bare endpoint.

Every server runs with the checked-in gunicorn settings (2 workers x 4
threads here). memsvc serves a user holding 1,000 memories with the bundled
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
import urllib.parse
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


from bench.report import recording  # noqa: E402
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


def breakdown(db_path: str, key: str, tmp: str) -> list[tuple[str, float]]:
    """Median time of each stage of one search, in-process."""
    import statistics

    from memsvc import clock
    from memsvc import create_app
    from memsvc.api.context import store
    from memsvc.limits import Limits
    from memsvc.search import Scope
    from memsvc.search import nearest
    from memsvc.services import keys as key_service

    app = create_app(
        {
            "DATABASE": db_path,
            "LIMITS_DIR": os.path.join(tmp, "limits-inproc"),
            "QUERY_CACHE_ENTRIES": 0,
        }
    )
    rt = app.extensions["memsvc"]
    client = app.test_client()
    qs = queries(200)

    def median(fn, reps=200):
        fn(0)
        times = []
        for i in range(reps):
            started = time.perf_counter()
            fn(i)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    def request(i):
        payload = json.dumps({"userId": "u", "query": qs[i % len(qs)], "threshold": 0})
        resp = client.get(
            "/trpc/memory.search?input=" + urllib.parse.quote(payload), headers={"x-api-key": key}
        )
        assert resp.status_code == 200, resp.data

    total = median(request)
    embed = median(lambda i: rt.embedder.embed([qs[i % len(qs)]]))
    vectors = [rt.embedder.embed([q])[0] for q in qs]
    with app.app_context():
        s = store()

        def search(i):
            scope = Scope(clock.now_ms())
            nearest(s, rt.search_cache, "bench", "u", vectors[i % len(vectors)], 10, 0.0, scope)

        cache = median(search)
        auth = median(lambda i: key_service.verify(s, key))
    limits = median(
        lambda i: rt.limiter.release("k", rt.limiter.acquire("k", Limits(100_000, 1000)))
    )
    rest = total - embed - cache - auth - limits
    return [
        ("whole request (Flask test client)", total),
        ("embedding the query (local model)", embed),
        ("search: counters, scan, exact rank, rows", cache),
        ("API key check", auth),
        ("limits (acquire + release)", limits),
        ("the rest: wire, Flask, validation, JSON", rest),
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
        # Warm each: model loaded, caches filled, connections open.
        for name, server, _ in servers:
            wrk(server.url, luas[name], 4, 2)
        wrk(bare.url, luas[servers[0][0]], 4, 1)
        results: dict[tuple[str, int], tuple[float, float, int]] = {}
        for c in levels:
            for name, server, _ in servers:
                results[(name, c)] = wrk(server.url, luas[name], c, args.seconds)
            results[("bare", c)] = wrk(bare.url, luas[servers[0][0]], c, args.seconds)
        stages = breakdown(servers[1][1].env["MEMSVC_DATABASE"], servers[1][2], str(tmp))

    print(
        f"memory.search, user with {args.memories} memories, bundled model; gunicorn "
        f"2 workers x 4 threads; wrk {args.seconds:g}s per level, 500 distinct queries"
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
    print("where one search's time goes now (in-process medians, new forward, no query cache):")
    total = stages[0][1]
    for name, ms in stages:
        print(f"  {name:<44}{ms:>8.3f} ms{ms / total:>7.0%}")


if __name__ == "__main__":
    with recording("http_search"):
        main()
