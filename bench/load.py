"""A small closed-loop HTTP load generator for memsvc benchmarks.

Each of N threads keeps one keep-alive connection and sends requests back
to back for a fixed time; the result is requests per second and latency
percentiles. Client and server share the machine, so compare figures from
the same run, not across runs.
"""

from __future__ import annotations

import dataclasses
import http.client
import threading
import time
import typing as t
import urllib.parse


@dataclasses.dataclass
class Result:
    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000 if ordered else 0


def run(
    base_url: str,
    make_request: t.Callable[[int, int], tuple[str, str, bytes | None, dict[str, str]]],
    *,
    threads: int = 8,
    seconds: float = 5.0,
    ok: t.Callable[[int], bool] = lambda status: status == 200,
) -> Result:
    """Drive ``make_request(i, thread) -> (method, path, body, headers)`` from ``threads``
    threads; ``i`` counts the thread's requests."""
    parsed = urllib.parse.urlsplit(base_url)
    stop = time.monotonic() + seconds
    lock = threading.Lock()
    total = Result(0, 0, seconds, [])

    def worker(thread: int) -> None:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        count = errors = 0
        latencies = []
        i = 0
        while time.monotonic() < stop:
            method, path, body, headers = make_request(i, thread)
            i += 1
            started = time.perf_counter()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                good = ok(resp.status)
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
                good = False
            latencies.append(time.perf_counter() - started)
            count += 1
            errors += not good
        conn.close()
        with lock:
            total.requests += count
            total.errors += errors
            total.latencies.extend(latencies)

    failures: list[BaseException] = []

    def guarded(thread: int) -> None:
        try:
            worker(thread)
        except BaseException as e:  # surfaced below: a benchmark must not fail quietly
            failures.append(e)

    pool = [threading.Thread(target=guarded, args=(n,)) for n in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if failures:
        raise failures[0]
    return total


def get(path: str, input: t.Any, headers: dict[str, str]) -> tuple[str, str, None, dict[str, str]]:
    import json

    return "GET", f"{path}?input={urllib.parse.quote(json.dumps(input))}", None, headers


def interleaved(cases: list[tuple[str, t.Callable[[], Result]]], rounds: int) -> dict[str, Result]:
    """Run each case once per round, cases interleaved; the median round of each.

    Interleaving spreads drift in the machine's load over every case alike.
    """
    runs: dict[str, list[Result]] = {name: [] for name, _ in cases}
    for _ in range(rounds):
        for name, case in cases:
            runs[name].append(case())
    return {name: sorted(rs, key=lambda r: r.rps)[len(rs) // 2] for name, rs in runs.items()}
