"""What keeping lastUsedAt current costs: throughput with and without its writes.

Starts memsvc under gunicorn (the checked-in settings, 2 workers) three
times, with LAST_USED_RESOLUTION_SECONDS set to
  1     the default: at most one write per key per second
  0     a write on every call (what a naive implementation does)
  86400 effectively no writes (the baseline)
and drives memory.getAll and memory.search on one key from 8 client threads.

    python tests/bench/last_used.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tests.bench import load  # noqa: E402
from tests.e2e.conftest import start_server  # noqa: E402

SETTINGS = [("no writes (baseline)", 86400), ("default: 1 write/s/key", 1), ("write every call", 0)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    rows = []
    for name, resolution in SETTINGS:
        with tempfile.TemporaryDirectory() as tmp:
            server = start_server(
                pathlib.Path(tmp), MEMSVC_LAST_USED_RESOLUTION_SECONDS=str(resolution)
            )
            try:
                key = server.create_key("bench", "bench")
                headers = {"x-api-key": key}
                for i in range(100):
                    requests.post(
                        f"{server.trpc}/memory.add",
                        json={"userId": "u", "content": f"fact {i} about tea and trains"},
                        headers=headers,
                        timeout=30,
                    ).raise_for_status()
                path = "/trpc/memory.getAll"
                get_all = load.run(
                    server.url,
                    lambda i: load.get(path, {"userId": "u", "limit": 10}, headers),
                    threads=args.threads,
                    seconds=args.seconds,
                )
                spath = "/trpc/memory.search"
                search = load.run(
                    server.url,
                    lambda i: load.get(spath, {"userId": "u", "query": f"tea {i % 50}"}, headers),
                    threads=args.threads,
                    seconds=args.seconds,
                )
                rows.append((name, get_all, search))
            finally:
                server.stop()
    base_get, base_search = rows[0][1].rps, rows[0][2].rps
    print(
        f"{args.threads} client threads, {args.seconds:g}s per run, gunicorn 2 workers x 4 threads"
    )
    print(
        f"{'lastUsedAt writes':<26}{'getAll req/s':>13}{'ratio':>7}{'p50 ms':>8}"
        f"{'search req/s':>14}{'ratio':>7}{'p50 ms':>8}{'errors':>8}"
    )
    for name, g, s in rows:
        print(
            f"{name:<26}{g.rps:>13.0f}{g.rps / base_get:>7.2f}{g.pct(50):>8.1f}"
            f"{s.rps:>14.0f}{s.rps / base_search:>7.2f}{s.pct(50):>8.1f}{g.errors + s.errors:>8}"
        )
    print(json.dumps({"rows": [[n, g.rps, s.rps] for n, g, s in rows]}))


if __name__ == "__main__":
    main()
