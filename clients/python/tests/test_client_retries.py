"""Retries: 429 and 503 after Retry-After, connection failures, and writes never lost or doubled."""

from __future__ import annotations

import asyncio
import logging
import re
import select
import subprocess
import sys
import threading
import time
import typing as t

import pytest
from client_support import DroppingProxy
from client_support import Recorder
from client_support import create_key
from client_support import refused_url
from memsvc_client import AsyncMemsvc
from memsvc_client import ConnectionFailed
from memsvc_client import Memsvc
from memsvc_client import RateLimited
from memsvc_server import FakeProvider
from memsvc_server import Server
from memsvc_server import start_server

from memsvc.limits import Limiter
from memsvc.limits import Limits

pytestmark = pytest.mark.e2e

PER_MINUTE = 5


def retries_logged(caplog: pytest.LogCaptureFixture, code: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "memsvc_client" and f"({code})" in r.getMessage()
    ]


@pytest.fixture
def limited(tmp_path: t.Any) -> t.Iterator[Server]:
    """A server allowing each key 5 calls in any rolling 60 seconds."""
    s = start_server(tmp_path, MEMSVC_RATE_LIMIT_PER_MINUTE=str(PER_MINUTE))
    yield s
    s.stop()


def age_window(server: Server, key_id: str, calls: int, seconds_ago: float) -> None:
    """Record ``calls`` accepted calls of the key ``seconds_ago``, in the server's own limiter.

    The window is 60 s, so waiting for a real one to pass would take a
    minute; calls recorded 55 s ago make the server's Retry-After about 5 s.
    The limiter's state is shared by every process on the box through files
    in MEMSVC_LIMITS_DIR, on the one monotonic clock they all read.
    """
    now = time.monotonic_ns() // 1_000_000
    back_then = Limiter(
        server.env["MEMSVC_LIMITS_DIR"], clock=lambda: now - int(seconds_ago * 1000)
    )
    for _ in range(calls):
        held = back_then.acquire(key_id, Limits(PER_MINUTE, 10))
        back_then.release(key_id, held)


def test_a_key_at_its_rate_limit_waits_and_every_write_lands(
    limited: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memsvc_client")
    key_id, key = create_key(limited, "acme")
    counter = limited.create_key("acme", "counter")  # a key of its own: counting uses no quota
    # Two calls 55 s ago: the loop's first three calls fill the window, the
    # fourth is refused until those two are 60 s old, the fifth passes.
    age_window(limited, key_id, 2, seconds_ago=55)
    contents = [f"write {i} under the rate limit" for i in range(5)]

    started = time.monotonic()
    with Memsvc(limited.url, api_key=key, max_retries=3) as memsvc:
        for content in contents:
            memsvc.add("u", content)
    elapsed = time.monotonic() - started

    waits = retries_logged(caplog, "TOO_MANY_REQUESTS")
    assert len(waits) == 1, waits  # refused once, mid-loop, then sent again
    assert 1 <= elapsed < 20, elapsed  # it waited for the window, and not a minute
    with Memsvc(limited.url, api_key=counter) as memsvc:
        stored = [m.content for m in memsvc.get_all("u")]
    assert sorted(stored) == sorted(contents)  # every write, once

    # The window is now full of the loop's own calls, the oldest seconds old:
    # without retries the next write is refused at once, typed, and not stored.
    with Memsvc(limited.url, api_key=key, max_retries=0) as memsvc:
        started = time.monotonic()
        with pytest.raises(RateLimited) as refused:
            memsvc.add("u", "one too many")
        assert time.monotonic() - started < 2
    e = refused.value
    assert (e.code, e.http_status, e.path) == ("TOO_MANY_REQUESTS", 429, "memory.add")
    assert 30 <= e.retry_after <= 60 and "5 requests per minute" in e.message
    # Waiting longer than max_retry_wait is not allowed: raised at once too.
    with Memsvc(limited.url, api_key=key, max_retries=3, max_retry_wait=10) as memsvc:
        started = time.monotonic()
        with pytest.raises(RateLimited):
            memsvc.get_all("u")
        assert time.monotonic() - started < 2
    with Memsvc(limited.url, api_key=counter) as memsvc:
        assert len(memsvc.get_all("u")) == 5


@pytest.fixture
def one_call_a_minute(server: Server) -> str:
    """A key of its own limited to one call a minute, with ``memsvc keys set-limits``."""
    key_id, key = create_key(server, "acme")
    server.set_limits(key_id, per_minute=1)
    return key


WAIT_WARNING = re.compile(
    r"^memory\.getAll failed \(TOO_MANY_REQUESTS\): Rate limit exceeded: 1 requests per minute; "
    r"waiting (\d+\.\d\d)s \(the server's Retry-After\) before retry 1 of 3$"
)


def test_waiting_out_a_429_is_a_warning_saying_how_long_and_why(
    server: Server, one_call_a_minute: str, tmp_path: t.Any
) -> None:
    # As a user runs it, logging not configured: Python prints warnings (and
    # only them) on stderr. The second call is refused for about a minute;
    # the warning comes as the wait begins, not after it.
    script = f"""
from memsvc_client import Memsvc
with Memsvc({server.url!r}, api_key={one_call_a_minute!r}) as memsvc:
    memsvc.get_all("u")
    print("first call answered", flush=True)
    memsvc.get_all("u")
"""
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline() == "first call answered\n"
            ready, _, _ = select.select([proc.stderr], [], [], 20)
            assert ready, "nothing on stderr: the client is waiting silently"
            line = proc.stderr.readline().rstrip("\n")
            elapsed = time.monotonic() - started
            assert proc.poll() is None  # still waiting
        finally:
            proc.kill()
    found = WAIT_WARNING.match(line)
    assert found, line
    assert 50 <= float(found.group(1)) <= 60 and elapsed < 20
    assert one_call_a_minute not in line


def test_the_async_client_warns_too_each_time_it_waits(
    server: Server, one_call_a_minute: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memsvc_client")

    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=one_call_a_minute) as memsvc:
            await memsvc.get_all("u")
            waiting = asyncio.create_task(memsvc.get_all("u"))
            for _ in range(200):  # up to 20 s
                if caplog.records:
                    break
                await asyncio.sleep(0.1)
            waiting.cancel()  # not a minute more: the wait is what is tested
            with pytest.raises(asyncio.CancelledError):
                await waiting

    asyncio.run(scenario())
    assert [r.levelno for r in caplog.records] == [logging.WARNING], caplog.records
    found = WAIT_WARNING.match(caplog.records[0].getMessage())
    assert found, caplog.records[0].getMessage()


def test_a_503_from_a_busy_provider_is_waited_out(
    tmp_path: t.Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memsvc_client")
    with FakeProvider(delay=2.5) as provider:
        # One worker, one call at a time at the provider: a second call that
        # has waited half of EMBEDDING_TIMEOUT (2 s) gets 503, Retry-After 1.
        server = start_server(
            tmp_path,
            WEB_CONCURRENCY="1",
            MEMSVC_EMBEDDING_MAX_CONCURRENCY="1",
            MEMSVC_EMBEDDING_TIMEOUT="4",
            MEMSVC_RATE_LIMIT_PER_MINUTE="0",
            **provider.settings,
        )
        try:
            key = server.create_key("acme", "busy")
            with Memsvc(server.url, api_key=key, max_retries=3) as memsvc:
                first = threading.Thread(target=memsvc.add, args=("u", "first memory"))
                first.start()
                time.sleep(0.3)  # the first is at the provider
                memsvc.add("u", "second memory")
                first.join(30)
                assert sorted(m.content for m in memsvc.get_all("u")) == [
                    "first memory",
                    "second memory",
                ]
        finally:
            server.stop()
    assert retries_logged(caplog, "SERVICE_UNAVAILABLE")


def test_connection_refused_is_retried_a_bounded_number_of_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="memsvc_client")
    url = refused_url()
    started = time.monotonic()
    with Memsvc(url, api_key="sk_memsvc_x", max_retries=2) as memsvc:
        with pytest.raises(ConnectionFailed) as failed:
            memsvc.add("u", "never sent")
    assert time.monotonic() - started < 5
    e = failed.value
    assert (e.code, e.http_status, e.path) == ("CONNECTION_FAILED", None, "memory.add")
    assert e.request_sent is False  # refused: a write too may be tried again
    assert len(retries_logged(caplog, "CONNECTION_FAILED")) == 2

    async def scenario() -> None:
        async with AsyncMemsvc(url, api_key="sk_memsvc_x", max_retries=1) as memsvc:
            with pytest.raises(ConnectionFailed) as failed:
                await memsvc.get_all("u")
            assert failed.value.request_sent is False

    caplog.clear()
    asyncio.run(scenario())
    assert len(retries_logged(caplog, "CONNECTION_FAILED")) == 1


def test_a_search_that_could_not_ask_service_info_fails_as_a_search() -> None:
    # The recommended threshold is asked first; no answer to that is the
    # search's failure, and the search itself was never sent.
    with Memsvc(refused_url(), api_key="sk_memsvc_x", max_retries=0) as memsvc:
        with pytest.raises(ConnectionFailed) as failed:
            memsvc.search("u", "anything")
    e = failed.value
    assert (e.path, e.request_sent) == ("memory.search", False)
    assert str(e).startswith("CONNECTION_FAILED on memory.search: no answer from memsvc")


def test_a_write_whose_answer_was_lost_is_not_sent_again(
    server: Server, api_key: str, user: str, dropping_proxy: t.Callable[[int], DroppingProxy]
) -> None:
    proxy = dropping_proxy(1)
    with Memsvc(proxy.url, api_key=api_key, max_retries=3) as memsvc:
        with pytest.raises(ConnectionFailed) as lost:
            memsvc.add(user, "applied, answer lost")
    assert lost.value.request_sent is True and lost.value.path == "memory.add"
    assert proxy.requests == 1  # not sent a second time...
    with Memsvc(server.url, api_key=api_key) as direct:
        stored = direct.get_all(user)
    assert [m.content for m in stored] == ["applied, answer lost"]  # ...and stored once


def test_with_dedupe_a_lost_answer_is_retried_and_stored_once(
    server: Server, api_key: str, user: str, dropping_proxy: t.Callable[[int], DroppingProxy]
) -> None:
    proxy = dropping_proxy(2)
    with Memsvc(proxy.url, api_key=api_key, max_retries=3) as memsvc:
        added = memsvc.add(user, "sent three times", dedupe=True)
    assert proxy.requests == 3
    with Memsvc(server.url, api_key=api_key) as direct:
        assert direct.get_all(user) == [added]


def test_queries_are_retried_after_a_lost_answer(
    server: Server, api_key: str, user: str, dropping_proxy: t.Callable[[int], DroppingProxy]
) -> None:
    proxy = dropping_proxy(1)

    async def scenario() -> None:
        async with AsyncMemsvc(proxy.url, api_key=api_key, max_retries=1) as memsvc:
            assert await memsvc.get_all(user) == []

    asyncio.run(scenario())
    assert proxy.requests == 2


def test_threshold_none_uses_the_deployments_recommended_threshold(
    tmp_path: t.Any, recorder: Recorder
) -> None:
    # The operator's default (0.95) and the recommended threshold (0.2)
    # differ widely: which one a search used shows in what it finds.
    server = start_server(
        tmp_path,
        MEMSVC_RECOMMENDED_THRESHOLD="0.2",
        MEMSVC_SEARCH_DEFAULT_THRESHOLD="0.95",
    )
    try:
        key = server.create_key("acme", "threshold")
        with Memsvc(server.url, api_key=key, http_client=recorder.client()) as memsvc:
            memsvc.add("u", "Erin is allergic to peanuts")
            found = memsvc.search("u", "What food should Erin avoid?")
            assert [m.content for m in found] == ["Erin is allergic to peanuts"]
            assert found[0].similarity is not None and 0.2 <= found[0].similarity < 0.95
            assert memsvc.search("u", "What food should Erin avoid?", threshold=0.95) == []
            memsvc.search("u", "peanuts")
        assert recorder.procedures().count("service.info") == 1  # cached per client
        assert [i.get("threshold") for i in recorder.inputs("memory.search")] == [0.2, 0.95, 0.2]
    finally:
        server.stop()


def test_a_server_recommending_no_threshold_gets_none_and_applies_its_own(
    tmp_path: t.Any, recorder: Recorder
) -> None:
    # A model memsvc has not measured: service.info recommends no threshold,
    # so the client sends none and the operator's default (0 here) applies.
    with FakeProvider(delay=0) as provider:
        server = start_server(tmp_path, **provider.settings, MEMSVC_SEARCH_DEFAULT_THRESHOLD="0")
        try:
            key = server.create_key("acme", "unmeasured")
            with Memsvc(server.url, api_key=key, http_client=recorder.client()) as memsvc:
                added = memsvc.add("u", "Frank collects stamps")
                assert [m.id for m in memsvc.search("u", "hobbies")] == [added.id]
                memsvc.search("u", "hobbies", mode="semantic")
                memsvc.search("u", "hobbies", threshold=0.9)
                assert memsvc.info()["embedder"]["recommendedThreshold"] is None
        finally:
            server.stop()
    assert recorder.procedures().count("service.info") == 2  # once cached, once asked for
    assert [(i["mode"], i.get("threshold")) for i in recorder.inputs("memory.search")] == [
        ("hybrid", None),
        ("semantic", None),
        ("hybrid", 0.9),
    ]
