"""What the Python client costs per call, against raw HTTP making the same calls.

Starts memsvc under gunicorn (the checked-in settings, limits off so every
call is the read being measured), stores 100 memories for one end user,
then makes the same calls, one after another on one keep-alive connection,
three ways:

  requests   a requests.Session: GET with the input as JSON, .json() on the answer
  httpx      an httpx.Client, the same: the client's own HTTP library, bare
  memsvc     memsvc_client.Memsvc: the same calls, answers as Memory objects

for memory.getAll (limit 10 and limit 100) and memory.getById. Rounds
interleave the three (in a rotating order), so drift in the machine's load
affects all alike; the median round is reported, in calls per second. The
client's cost is its throughput relative to bare httpx.

The server's time varies more from round to round than the client's cost,
so the same calls are also timed without a server: bare httpx and the
client, each answered by an httpx.MockTransport with the answers the server
gave, in microseconds of client-side work per call.

    python -m bench.sdk [--calls 300] [--rounds 11]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time
import typing as t

import httpx
import requests
from memsvc_client import Memsvc

from bench.report import recording
from tests.support.servers import start_server

USER = "bench-user"
WAYS = ["requests", "httpx", "memsvc"]
Op = t.Callable[[], object]


def rate(call: Op, calls: int) -> float:
    """Calls per second of ``calls`` calls made back to back."""
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return calls / (time.perf_counter() - started)


def interleaved(
    ops: dict[str, dict[str, Op]], calls: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Median calls/s of each way of each op, over rounds in rotating order."""
    ways = list(next(iter(ops.values())))
    results = {name: {way: [] for way in ways} for name in ops}  # type: dict[str, dict[str, list[float]]]
    for op in ops.values():  # warm up connections and caches
        for way in ways:
            rate(op[way], 20)
    for r in range(rounds):
        order = ways[r % len(ways) :] + ways[: r % len(ways)]
        for name, op in ops.items():
            for way in order:
                results[name][way].append(rate(op[way], calls))
    return {
        name: {way: statistics.median(rates) for way, rates in by_way.items()}
        for name, by_way in results.items()
    }


def calls(
    base: str, sdk: Memsvc, bare: httpx.Client, session: requests.Session | None, one: str
) -> dict[str, dict[str, Op]]:
    """The calls measured, each made by each way."""

    def raw(client: t.Any, procedure: str, input: dict[str, t.Any]) -> Op:
        encoded = json.dumps(input)
        url = f"{base}/{procedure}"
        return lambda: client.get(url, params={"input": encoded}).json()["result"]["data"]

    inputs = {
        "getAll limit 10": ("memory.getAll", {"userId": USER, "limit": 10}),
        "getAll limit 100": ("memory.getAll", {"userId": USER, "limit": 100}),
        "getById": ("memory.getById", {"id": one}),
    }
    sdk_calls: dict[str, Op] = {
        "getAll limit 10": lambda: sdk.get_all(USER, limit=10),
        "getAll limit 100": lambda: sdk.get_all(USER, limit=100),
        "getById": lambda: sdk.get(one),
    }
    ops: dict[str, dict[str, Op]] = {}
    for name, (procedure, input) in inputs.items():
        ops[name] = {}
        if session is not None:
            ops[name]["requests"] = raw(session, procedure, input)
        ops[name]["httpx"] = raw(bare, procedure, input)
        ops[name]["memsvc"] = sdk_calls[name]
    return ops


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300, help="per measurement")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            pathlib.Path(tmp), MEMSVC_RATE_LIMIT_PER_MINUTE="0", MEMSVC_CONCURRENCY_LIMIT="0"
        )
        try:
            key = server.create_key("bench", "bench")
            headers = {"x-api-key": key}
            with (
                Memsvc(server.url, api_key=key) as sdk,
                httpx.Client(headers=headers) as bare,
                requests.Session() as session,
            ):
                session.headers.update(headers)
                for i in range(100):
                    one = sdk.add(USER, f"fact {i} about tea, trains and the sea").id
                ops = calls(server.trpc, sdk, bare, session, one)
                # The same answers, so the same work on the server; kept for the
                # measurement without it.
                answers: dict[str, bytes] = {}
                for name, op in ops.items():
                    assert op["requests"]() == op["httpx"]()
                    procedure = "memory.getById" if name == "getById" else "memory.getAll"
                    input = {"id": one} if name == "getById" else {"userId": USER}
                    if name != "getById":
                        input["limit"] = int(name.rsplit(" ", 1)[1])
                    answers[name] = bare.get(
                        f"{server.trpc}/{procedure}", params={"input": json.dumps(input)}
                    ).content
                served = interleaved(ops, args.calls, args.rounds)
        finally:
            server.stop()

    # Without a server: each URL answered with what the server answered.
    def answer(request: httpx.Request) -> httpx.Response:
        raw = request.url.params["input"]
        input = json.loads(raw)
        name = "getById" if "id" in input else f"getAll limit {input['limit']}"
        return httpx.Response(
            200, content=answers[name], headers={"content-type": "application/json"}
        )

    base = "http://memsvc.invalid/trpc"
    with (
        httpx.Client(transport=httpx.MockTransport(answer), headers=headers) as bare,
        httpx.Client(transport=httpx.MockTransport(answer)) as inner,
        Memsvc("http://memsvc.invalid", api_key=key, http_client=inner) as sdk,
    ):
        offline = interleaved(calls(base, sdk, bare, None, one), args.calls * 10, args.rounds)

    print(
        f"{args.calls} sequential calls per measurement, one keep-alive connection, median of "
        f"{args.rounds} interleaved rounds; gunicorn 2 workers x 4 threads on the same machine"
    )
    print(
        f"{'call':<18}{'requests/s':>11}{'httpx/s':>9}{'memsvc/s':>10}"
        f"{'memsvc/httpx':>14}{'client cost':>13}"
    )
    for name, median in served.items():
        ratio = median["memsvc"] / median["httpx"]
        print(
            f"{name:<18}{median['requests']:>11.0f}{median['httpx']:>9.0f}"
            f"{median['memsvc']:>10.0f}{ratio:>14.3f}{(1 - ratio) * 100:>12.1f}%"
        )
    print()
    print("Client-side work per call, without the server (httpx.MockTransport, same answers):")
    print(
        f"{'call':<18}{'httpx us':>9}{'memsvc us':>10}{'extra us':>9}{'share of a served call':>24}"
    )
    for name, median in offline.items():
        bare_us, sdk_us = 1e6 / median["httpx"], 1e6 / median["memsvc"]
        served_us = 1e6 / served[name]["httpx"]
        print(
            f"{name:<18}{bare_us:>9.0f}{sdk_us:>10.0f}{sdk_us - bare_us:>9.0f}"
            f"{(sdk_us - bare_us) / served_us * 100:>23.1f}%"
        )


if __name__ == "__main__":
    with recording("sdk"):
        main()
