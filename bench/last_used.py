"""What keeping lastUsedAt current costs: throughput with and without its writes.

Starts memsvc under gunicorn (the checked-in settings, 2 workers) three
times, with LAST_USED_RESOLUTION_SECONDS set to
  1     the default: at most one write per key per second
  0     a write on every call (what a naive implementation does)
  86400 effectively no writes (the baseline)
and drives memory.getAll and memory.search on one key from 8 client threads.

    python -m bench.last_used [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import tempfile

import requests

from bench import load
from bench.report import recording
from tests.support.servers import start_server

SETTINGS = [("no writes (baseline)", 86400), ("default: 1 write/s/key", 1), ("write every call", 0)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        servers = []
        for name, resolution in SETTINGS:
            tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            # Limits off: with them every call past the 100th of a minute
            # would be a quick 429, not the read being measured.
            server = start_server(
                tmp,
                MEMSVC_LAST_USED_RESOLUTION_SECONDS=str(resolution),
                MEMSVC_RATE_LIMIT_PER_MINUTE="0",
                MEMSVC_CONCURRENCY_LIMIT="0",
            )
            stack.callback(server.stop)
            headers = {"x-api-key": server.create_key("bench", "bench")}
            for i in range(100):
                requests.post(
                    f"{server.trpc}/memory.add",
                    json={"userId": "u", "content": f"fact {i} about tea and trains"},
                    headers=headers,
                    timeout=30,
                ).raise_for_status()
            servers.append((name, server, headers))
        # Rounds interleave the settings, so drift in the machine's load
        # affects all of them alike; the median round is reported.
        results: dict[str, dict[str, list[load.Result]]] = {
            name: {"getAll": [], "search": []} for name, _ in SETTINGS
        }
        for _ in range(args.rounds):
            for name, server, headers in servers:
                results[name]["getAll"].append(
                    load.run(
                        server.url,
                        lambda i, _, h=headers: load.get(
                            "/trpc/memory.getAll", {"userId": "u", "limit": 10}, h
                        ),
                        threads=args.threads,
                        seconds=args.seconds,
                    )
                )
                results[name]["search"].append(
                    load.run(
                        server.url,
                        lambda i, _, h=headers: load.get(
                            "/trpc/memory.search", {"userId": "u", "query": f"tea {i % 50}"}, h
                        ),
                        threads=args.threads,
                        seconds=args.seconds,
                    )
                )

    def median(runs: list[load.Result]) -> load.Result:
        return sorted(runs, key=lambda r: r.rps)[len(runs) // 2]

    base = {op: median(results[SETTINGS[0][0]][op]).rps for op in ("getAll", "search")}
    print(
        f"{args.threads} client threads, median of {args.rounds} interleaved rounds of "
        f"{args.seconds:g}s, gunicorn 2 workers x 4 threads"
    )
    print(
        f"{'lastUsedAt writes':<26}{'getAll req/s':>13}{'ratio':>7}{'p50 ms':>8}"
        f"{'search req/s':>14}{'ratio':>7}{'p50 ms':>8}{'errors':>8}"
    )
    for name, _ in SETTINGS:
        g = median(results[name]["getAll"])
        s = median(results[name]["search"])
        errors = sum(r.errors for op in results[name].values() for r in op)
        print(
            f"{name:<26}{g.rps:>13.0f}{g.rps / base['getAll']:>7.2f}{g.pct(50):>8.1f}"
            f"{s.rps:>14.0f}{s.rps / base['search']:>7.2f}{s.pct(50):>8.1f}{errors:>8}"
        )


if __name__ == "__main__":
    with recording("last_used"):
        main()
