"""What the per-key limiter costs: memory.getAll throughput with limits on and off.

Starts memsvc under gunicorn (the checked-in settings, 2 workers x 4
threads) twice: limits off (both settings 0) and limits on, with keys whose
own rate limit is high enough never to refuse (100,000 a minute; the
concurrency limit stays at its default, 10, above the 8 client threads), so
that every call runs the limiter's whole path. With limits on it drives one
key from all client threads (every call contends for that key's lock), and
one key per client thread.

    python -m bench.limits [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import tempfile

from bench import load
from bench.report import recording
from tests.support.servers import start_server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    path = "/trpc/memory.getAll"
    with contextlib.ExitStack() as stack:

        def server(**settings):
            s = start_server(
                pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory())), **settings
            )
            stack.callback(s.stop)
            return s

        off = server(MEMSVC_RATE_LIMIT_PER_MINUTE="0", MEMSVC_CONCURRENCY_LIMIT="0")
        on = server()
        off_key = off.create_key("bench", "k")
        on_keys = []
        for i in range(args.threads):
            secret = on.create_key("bench", f"k{i}")
            key_id = [
                line.split()[0]
                for line in on.cli("keys", "list").stdout.splitlines()
                if f" k{i} " in line
            ][0]
            on.cli("keys", "set-limits", key_id, "--per-minute", "100000")
            on_keys.append(secret)

        def case(s, keys):
            return lambda: load.run(
                s.url,
                lambda i, thread: load.get(
                    path, {"userId": "u", "limit": 10}, {"x-api-key": keys[thread % len(keys)]}
                ),
                threads=args.threads,
                seconds=args.seconds,
            )

        results = load.interleaved(
            [
                ("limits off", case(off, [off_key])),
                ("limits on, 1 key", case(on, on_keys[:1])),
                (f"limits on, {args.threads} keys", case(on, on_keys)),
            ],
            args.rounds,
        )
    base = results["limits off"].rps
    print(
        f"memory.getAll, {args.threads} client threads, median of {args.rounds} interleaved "
        f"rounds of {args.seconds:g}s, gunicorn 2 workers x 4 threads"
    )
    print(f"{'':<22}{'req/s':>8}{'ratio':>7}{'p50 ms':>8}{'p95 ms':>8}{'errors':>8}")
    for name, r in results.items():
        print(
            f"{name:<22}{r.rps:>8.0f}{r.rps / base:>7.2f}{r.pct(50):>8.1f}"
            f"{r.pct(95):>8.1f}{r.errors:>8}"
        )


if __name__ == "__main__":
    with recording("limits"):
        main()
