"""Hostile load against real gunicorn: one careless or hostile client cannot take the
service from the others. Each test is bounded in time and size; make soak runs them
longer (MEMSVC_SOAK_SCALE)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import threading
import time

import pytest
import requests

from tests.support import figures
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

SCALE = figures.SCALE


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """A server with the checked-in settings, a short request deadline, and a key."""
    server = start_server(
        tmp_path_factory.mktemp("hostile"),
        MEMSVC_REQUEST_TIMEOUT="3",
        MEMSVC_RATE_LIMIT_PER_MINUTE="0",
        MEMSVC_CONCURRENCY_LIMIT="0",
    )
    server.key = server.create_key("tenant-A", "legit")
    yield server
    server.stop()


def address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def legit_call(server) -> float:
    """One ordinary call; its time in seconds (raises if it fails)."""
    started = time.monotonic()
    resp = requests.get(
        f"{server.trpc}/memory.getAll",
        params={"input": json.dumps({"userId": "u"})},
        headers={"x-api-key": server.key},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return time.monotonic() - started


def answer_of(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(deadline)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def trickle(server, head: bytes, every: float, stop: threading.Event) -> bytes:
    """Send ``head`` a byte at a time, ``every`` seconds apart; what the server answered."""
    with socket.create_connection(address(server), timeout=30) as sock:
        for byte in head:
            if stop.is_set():
                break
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break  # the server hung up: what did it say?
            time.sleep(every)
        return answer_of(sock, 5)


def under_attack(server, attack, connections: int, seconds: float) -> list[float]:
    """Run ``attack`` on ``connections`` connections; legit calls' times meanwhile."""
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        attackers = [pool.submit(attack, stop) for _ in range(connections)]
        time.sleep(1)
        times = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            times.append(legit_call(server))
        stop.set()
        answers = [a.result(timeout=60) for a in attackers]
    return times, answers


def test_slow_headers_hold_no_thread_and_are_cut_at_the_deadline(strict):
    head = b"GET /trpc/memory.getAll HTTP/1.1\r\nHost: x\r\nx-padding: " + b"a" * 200
    connections = 24 * SCALE  # more than the server's 2 x 8 threads
    started = time.monotonic()
    times, answers = under_attack(
        strict, lambda stop: trickle(strict, head, 0.5, stop), connections, 4
    )
    # Every legitimate call answered at once, all the while.
    assert max(times) < 1.0, times
    # Each slow client was answered 408, in the envelope, soon after its deadline.
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        body = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert body["error"]["code"] == "TIMEOUT"
    assert time.monotonic() - started < 15
    figures.report(
        f"hostile load: {connections} slow-header connections (a byte per 0.5 s): "
        f"{len(times)} legit calls meanwhile, slowest {max(times) * 1000:.0f} ms; "
        "every slow one answered 408"
    )


def test_slow_bodies_hold_no_thread_and_are_cut_at_the_deadline(strict):
    body = json.dumps({"userId": "u", "content": "x" * 300}).encode()
    head = (
        b"POST /trpc/memory.add HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"x-api-key: {strict.key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    )

    def attack(stop):
        with socket.create_connection(address(strict), timeout=30) as sock:
            sock.sendall(head)  # whole headers at once, then the body dribbles
            for byte in body:
                if stop.is_set():
                    break
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    break
                time.sleep(0.5)
            return answer_of(sock, 5)

    connections = 24 * SCALE
    times, answers = under_attack(strict, attack, connections, 4)
    assert max(times) < 1.0, times
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[:1]
    listed = requests.get(
        f"{strict.trpc}/memory.getAll",
        params={"input": json.dumps({"userId": "u"})},
        headers={"x-api-key": strict.key},
        timeout=10,
    ).json()
    assert listed == {"result": {"data": []}}  # nothing half-received was stored
    figures.report(
        f"hostile load: {connections} slow-body connections: {len(times)} legit calls, "
        f"slowest {max(times) * 1000:.0f} ms; every slow one answered 408, nothing stored"
    )


def test_a_request_line_over_the_limit_is_refused_before_the_rest_arrives(strict):
    with socket.create_connection(address(strict), timeout=30) as sock:
        sock.sendall(b"GET /trpc/memory.getAll?input=" + b"a" * (1024 * 1024 + 10))
        started = time.monotonic()
        answer = answer_of(sock, 10)  # no end of line ever sent
    assert time.monotonic() - started < 3
    assert answer.startswith(b"HTTP/1.1 400 ")
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["message"].startswith("Request line too long: at most 1048576 bytes")
    # Just under the limit is served.
    near = "x" * (1024 * 1024 - 2000)
    resp = requests.get(
        f"{strict.trpc}/memory.getAll",
        params={"input": json.dumps({"userId": "u", "pad": near})},
        headers={"x-api-key": strict.key},
        timeout=30,
    )
    assert resp.status_code == 200
    # The log holds neither URL: no line is longer than a few hundred bytes.
    assert max(len(line) for line in strict.output().splitlines()) < 1000


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_parallel_endless_request_lines_cost_the_workers_next_to_nothing(strict):
    pid = strict.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        workers = [int(p) for p in f.read().split()]
    before = sum(cpu_seconds(w) for w in workers)
    line = b"GET /trpc/memory.getAll?input=" + b"a" * (8 * 1024 * 1024)

    def attack(stop):
        with socket.create_connection(address(strict), timeout=30) as sock:
            try:
                sock.sendall(line)  # 8 MiB, never ended
            except OSError:
                pass  # cut off at the limit: what was said?
            return answer_of(sock, 5)

    connections = 4 * SCALE
    started = time.monotonic()
    times, answers = under_attack(strict, attack, connections, 2)
    seconds = time.monotonic() - started
    spent = sum(cpu_seconds(w) for w in workers) - before
    assert all(a.startswith(b"HTTP/1.1 400 ") or a == b"" for a in answers), answers
    assert any(a.startswith(b"HTTP/1.1 400 ") for a in answers)
    assert max(times) < 1.0, times
    assert spent < 1.0 * connections, spent
    figures.report(
        f"hostile load: {connections} parallel 8 MiB request lines: refused 400 at 1 MiB, "
        f"workers' CPU {spent:.2f} s in all, {len(times)} legit calls meanwhile, slowest "
        f"{max(times) * 1000:.0f} ms ({seconds:.1f} s)"
    )
