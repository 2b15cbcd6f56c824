"""The OpenAI-compatible embedder against a misbehaving provider, through HTTP.

Every way a provider can fail (timeouts, refused connections, 5xx, 429 with
and without Retry-After, answers that are not JSON or hold unusable
vectors, a 400) must reach the caller as the documented envelope: 500
``INTERNAL_SERVER_ERROR`` saying the embedding provider failed, or 400
``BAD_REQUEST`` when the provider refused the text. Nothing is stored,
retries are bounded (1 + ``EMBEDDING_MAX_RETRIES`` calls at most), the
waits between them are bounded, and ``/health`` stays 200. The provider is
faked with ``responses``, at the HTTP boundary and nowhere else.
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
import typing as t

import pytest
import requests
import responses

from memsvc.api.context import store as request_store
from memsvc.services import keys
from tests.support import figures
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

PROVIDER = "http://provider.test/v1"
ENDPOINT = PROVIDER + "/embeddings"
DIMENSIONS = 8
MAX_RETRIES = 2
GOOD = {"data": [{"index": 0, "embedding": [0.1 * (i + 1) for i in range(DIMENSIONS)]}]}


def vectors(*embeddings: t.Any) -> dict[str, t.Any]:
    return {"data": [{"index": i, "embedding": e} for i, e in enumerate(embeddings)]}


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


# name -> (responses.add keyword arguments, calls made, status to the caller, message part)
FAULTS: dict[str, tuple[dict[str, t.Any], int, int, str]] = {
    "read timeout": (
        {"body": requests.exceptions.ReadTimeout("slow")},
        1 + MAX_RETRIES,
        500,
        "no answer within",
    ),
    "connect timeout": (
        {"body": requests.exceptions.ConnectTimeout("no route")},
        1 + MAX_RETRIES,
        500,
        "no answer within",
    ),
    "connection refused": (
        {"body": requests.exceptions.ConnectionError("refused")},
        1 + MAX_RETRIES,
        500,
        "could not connect",
    ),
    "500": ({"status": 500, "json": {"error": {"message": "boom"}}}, 1 + MAX_RETRIES, 500, "500"),
    "502 html": ({"status": 502, "body": "<html>Bad Gateway</html>"}, 1 + MAX_RETRIES, 500, "502"),
    "503": ({"status": 503, "body": ""}, 1 + MAX_RETRIES, 500, "503"),
    "429 without retry-after": ({"status": 429}, 1 + MAX_RETRIES, 500, "429"),
    "429 retry-after 2": (
        {"status": 429, "headers": {"Retry-After": "2"}},
        1 + MAX_RETRIES,
        500,
        "429",
    ),
    "429 retry-after as a date": (
        {"status": 429, "headers": {"Retry-After": http_date(5)}},
        1 + MAX_RETRIES,
        500,
        "429",
    ),
    "429 retry-after garbage": (
        {"status": 429, "headers": {"Retry-After": "soon"}},
        1 + MAX_RETRIES,
        500,
        "429",
    ),
    "429 retry-after over 10 s": (
        {"status": 429, "headers": {"Retry-After": "30"}},
        1,
        500,
        "busy for 30s more",
    ),
    "503 retry-after a day": (
        {"status": 503, "headers": {"Retry-After": "86400"}},
        1,
        500,
        "busy for",
    ),
    "401 (the provider key is wrong)": (
        {"status": 401, "json": {"error": {"message": "Incorrect API key provided"}}},
        1,
        500,
        "HTTP 401",
    ),
    "404": ({"status": 404, "body": "not here"}, 1, 500, "HTTP 404"),
    "malformed json": ({"status": 200, "body": '{"data": [{"index": 0,'}, 1, 500, "not JSON"),
    "html instead of json": ({"status": 200, "body": "<html>hello</html>"}, 1, 500, "not JSON"),
    "json array": ({"status": 200, "json": [1, 2, 3]}, 1, 500, "no data[].embedding"),
    "no data": ({"status": 200, "json": {"object": "list"}}, 1, 500, "no data[].embedding"),
    "data is null": ({"status": 200, "json": {"data": None}}, 1, 500, "no data[].embedding"),
    "no index": (
        {"status": 200, "json": {"data": [{"embedding": [1.0] * DIMENSIONS}]}},
        1,
        500,
        "no data[].embedding",
    ),
    "empty data list": ({"status": 200, "json": {"data": []}}, 1, 500, "expected 1 vector"),
    "two vectors for one text": (
        {"status": 200, "json": vectors([1.0] * DIMENSIONS, [2.0] * DIMENSIONS)},
        1,
        500,
        "expected 1 vector",
    ),
    "too few dimensions": (
        {"status": 200, "json": vectors([1.0] * (DIMENSIONS - 1))},
        1,
        500,
        "dimensions",
    ),
    "too many dimensions": (
        {"status": 200, "json": vectors([1.0] * 1536)},
        1,
        500,
        "dimensions",
    ),
    "nested vector": (
        {"status": 200, "json": vectors([[1.0] * DIMENSIONS])},
        1,
        500,
        "dimensions",
    ),
    "strings for numbers": (
        {"status": 200, "json": vectors(["x"] * DIMENSIONS)},
        1,
        500,
        "not lists of numbers",
    ),
    "NaN": (
        {"status": 200, "body": '{"data":[{"index":0,"embedding":[NaN,1,1,1,1,1,1,1]}]}'},
        1,
        500,
        "NaN or infinite",
    ),
    "Infinity": (
        {"status": 200, "body": '{"data":[{"index":0,"embedding":[1,1,1,1,1,1,1,-Infinity]}]}'},
        1,
        500,
        "NaN or infinite",
    ),
    "overflowing float": (
        {"status": 200, "body": '{"data":[{"index":0,"embedding":[1e39,1,1,1,1,1,1,1]}]}'},
        1,
        500,
        "NaN or infinite",
    ),
    "zero vector": (
        {"status": 200, "json": vectors([0.0] * DIMENSIONS)},
        1,
        500,
        "all-zero vector",
    ),
    "400": (
        {"status": 400, "json": {"error": {"message": "invalid input: unsupported characters"}}},
        1,
        400,
        "the embedding provider rejected the text",
    ),
    "400 too long": (
        {"status": 400, "json": {"error": {"message": "maximum context length is 8192 tokens"}}},
        1,
        400,
        "too long for the embedding model",
    ),
    "400 without json": ({"status": 400, "body": "nope"}, 1, 400, "rejected the text: nope"),
}


@pytest.fixture
def provider_app(make_app):
    app = make_app(
        EMBEDDER="openai",
        EMBEDDING_URL=PROVIDER,
        EMBEDDING_MODEL="fake",
        EMBEDDING_DIMENSIONS=DIMENSIONS,
        RATE_LIMIT_PER_MINUTE=0,
        CONCURRENCY_LIMIT=0,
    )
    assert app.extensions["memsvc"].embedder.max_retries == MAX_RETRIES
    return app


@pytest.fixture
def waits(provider_app):
    """The embedder's sleeps between retries, recorded instead of slept."""
    recorded: list[float] = []
    provider_app.extensions["memsvc"].embedder.sleep = recorded.append
    return recorded


@pytest.fixture
def auth(provider_app):
    with provider_app.app_context():
        return {"x-api-key": keys.create(request_store(), "tenant-A", "faults", "memsvc").secret}


class FakeClock:
    """The embedder's monotonic clock, moved by the test (``step`` seconds per reading)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.step = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock(provider_app):
    fake = FakeClock()
    provider_app.extensions["memsvc"].embedder.clock = fake
    return fake


@pytest.fixture
def provider():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def embedding_calls(provider: responses.RequestsMock) -> int:
    return sum(1 for call in provider.calls if call.request.url == ENDPOINT)


def assert_nothing_stored_and_healthy(client: t.Any, auth: dict[str, str]) -> None:
    assert data(query(client, "memory.getAll", {"userId": "u"}, headers=auth)) == []
    health = client.get("/health")
    assert health.status_code == 200 and health.get_json()["status"] == "ok"


def assert_bounded_waits(waits: list[float], calls: int) -> None:
    assert len(waits) == calls - 1
    assert all(0 <= w <= 10 for w in waits), waits


def fault_params() -> list[t.Any]:
    # numpy warns when a provider's number overflows float32 (the answer is then
    # refused as infinite); pytest here turns warnings into errors.
    overflow = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
    return [
        pytest.param(name, marks=overflow) if name == "overflowing float" else name
        for name in FAULTS
    ]


@pytest.mark.parametrize("fault", fault_params())
def test_a_provider_fault_on_add_is_the_documented_error_and_stores_nothing(
    provider_app, provider, waits, auth, fault
):
    add_kwargs, calls, status, message = FAULTS[fault]
    provider.add(responses.POST, ENDPOINT, **add_kwargs)
    client = provider_app.test_client()

    resp = mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)

    code = "INTERNAL_SERVER_ERROR" if status == 500 else "BAD_REQUEST"
    error = assert_error(resp, status, code, "memory.add")
    if status == 500:
        assert error["message"].startswith("embedding provider failed"), error
    assert message in error["message"], error
    assert embedding_calls(provider) == calls
    assert_bounded_waits(waits, calls)
    assert_nothing_stored_and_healthy(client, auth)
    figures.count("provider faults", unit="faulty provider answers checked")


@pytest.mark.parametrize("fault", fault_params())
def test_a_provider_fault_on_search_is_the_same_error(provider_app, provider, waits, auth, fault):
    add_kwargs, calls, status, message = FAULTS[fault]
    client = provider_app.test_client()
    provider.add(responses.POST, ENDPOINT, json=GOOD)
    data(mutate(client, "memory.add", {"userId": "u", "content": "stored"}, headers=auth))
    provider.replace(responses.POST, ENDPOINT, **add_kwargs)

    resp = query(client, "memory.search", {"userId": "u", "query": "x"}, headers=auth)

    code = "INTERNAL_SERVER_ERROR" if status == 500 else "BAD_REQUEST"
    error = assert_error(resp, status, code, "memory.search")
    if status == 500:
        assert error["message"].startswith("embedding provider failed"), error
    assert message in error["message"], error
    assert embedding_calls(provider) == 1 + calls
    assert_bounded_waits(waits, calls)
    assert len(data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))) == 1
    figures.count("provider faults", unit="faulty provider answers checked")


def test_retry_after_is_honoured_and_then_the_add_succeeds(provider_app, provider, waits, auth):
    provider.add(responses.POST, ENDPOINT, status=429, headers={"Retry-After": "3"})
    provider.add(responses.POST, ENDPOINT, status=503)
    provider.add(responses.POST, ENDPOINT, json=GOOD)
    client = provider_app.test_client()

    added = data(mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth))

    assert embedding_calls(provider) == 3
    assert waits[0] == 3 and 0 < waits[1] <= 10
    listed = data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert [m["id"] for m in listed] == [added["id"]]


def test_backoff_without_retry_after_grows_and_stays_bounded(
    provider_app, provider, waits, auth, clock
):
    provider.add(responses.POST, ENDPOINT, status=500)
    client = provider_app.test_client()
    # Past the circuit breaker's pause before every call, so each one retries in full.
    clock.step = 60
    for _ in range(20):
        mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)
    firsts, seconds = waits[0::2], waits[1::2]
    assert len(firsts) == len(seconds) == 20
    # 0.5 s then 1 s, each with jitter down to half: never zero, never long.
    assert all(0.25 <= w <= 0.5 for w in firsts), firsts
    assert all(0.5 <= w <= 1.0 for w in seconds), seconds
    assert embedding_calls(provider) == 20 * (1 + MAX_RETRIES)


def test_a_batch_of_adds_against_a_failing_provider_fails_each_and_stores_nothing(
    provider_app, provider, waits, auth
):
    provider.add(responses.POST, ENDPOINT, status=500)
    client = provider_app.test_client()
    inputs = {str(i): {"userId": "u", "content": f"x{i}"} for i in range(3)}
    resp = client.post(
        "/trpc/memory.add,memory.add,memory.add?batch=1",
        data=json.dumps(inputs),
        headers={**auth, "Content-Type": "application/json"},
    )
    assert resp.status_code == 500
    for item in resp.get_json():
        assert item["error"]["code"] == "INTERNAL_SERVER_ERROR"
        assert item["error"]["message"].startswith("embedding provider failed")
    assert embedding_calls(provider) == 3 * (1 + MAX_RETRIES)
    assert_nothing_stored_and_healthy(client, auth)


def test_a_provider_that_recovers_serves_the_next_call(provider_app, provider, waits, auth):
    provider.add(responses.POST, ENDPOINT, status=500)
    client = provider_app.test_client()
    mutate(client, "memory.add", {"userId": "u", "content": "lost"}, headers=auth)
    provider.replace(responses.POST, ENDPOINT, json=GOOD)
    added = data(mutate(client, "memory.add", {"userId": "u", "content": "kept"}, headers=auth))
    listed = data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert [m["id"] for m in listed] == [added["id"]]


# -- the circuit breaker and the per-worker cap on waiting calls ------------------------------


def breaker_limits(app: t.Any) -> tuple[int, float]:
    embedder = app.extensions["memsvc"].embedder
    return embedder.BREAKER_FAILURES, embedder.BREAKER_SECONDS


def test_after_repeated_failures_calls_fail_at_once_then_one_probe_reopens(
    provider_app, provider, waits, auth, clock
):
    failures, pause = breaker_limits(provider_app)
    provider.add(responses.POST, ENDPOINT, status=503)
    client = provider_app.test_client()
    for _ in range(failures):
        assert_error(
            mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth),
            500,
            "INTERNAL_SERVER_ERROR",
            "memory.add",
        )
    made = embedding_calls(provider)
    assert made == failures * (1 + MAX_RETRIES)

    # Open: refused at once, with the same envelope, and the provider is left alone.
    for _ in range(5):
        error = assert_error(
            query(client, "memory.search", {"userId": "u", "query": "x"}, headers=auth),
            500,
            "INTERNAL_SERVER_ERROR",
            "memory.search",
        )
        assert error["message"].startswith("embedding provider failed")
    assert embedding_calls(provider) == made
    assert client.get("/health").status_code == 200
    assert data(query(client, "memory.getAll", {"userId": "u"}, headers=auth)) == []

    # After the pause one call probes; the provider is back, so it is served.
    clock.now += pause + 1
    provider.replace(responses.POST, ENDPOINT, json=GOOD)
    added = data(mutate(client, "memory.add", {"userId": "u", "content": "back"}, headers=auth))
    assert embedding_calls(provider) == made + 1
    again = data(mutate(client, "memory.add", {"userId": "u", "content": "again"}, headers=auth))
    listed = data(query(client, "memory.getAll", {"userId": "u"}, headers=auth))
    assert [m["id"] for m in listed] == [again["id"], added["id"]]


def test_a_failed_probe_keeps_the_breaker_open(provider_app, provider, waits, auth, clock):
    failures, pause = breaker_limits(provider_app)
    provider.add(responses.POST, ENDPOINT, status=500)
    client = provider_app.test_client()
    for _ in range(failures):
        mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)
    clock.now += pause + 1
    mutate(client, "memory.add", {"userId": "u", "content": "probe"}, headers=auth)
    made = embedding_calls(provider)
    assert made == (failures + 1) * (1 + MAX_RETRIES)
    resp = mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)
    assert_error(resp, 500, "INTERNAL_SERVER_ERROR", "memory.add")
    assert embedding_calls(provider) == made
    assert data(query(client, "memory.getAll", {"userId": "u"}, headers=auth)) == []


def test_text_the_provider_refuses_does_not_trip_the_breaker(
    provider_app, provider, waits, auth, clock
):
    failures, _ = breaker_limits(provider_app)
    provider.add(responses.POST, ENDPOINT, status=400, json={"error": {"message": "bad text"}})
    client = provider_app.test_client()
    for _ in range(failures * 3):
        resp = mutate(client, "memory.add", {"userId": "u", "content": "x"}, headers=auth)
        assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert embedding_calls(provider) == failures * 3
    provider.replace(responses.POST, ENDPOINT, json=GOOD)
    data(mutate(client, "memory.add", {"userId": "u", "content": "fine"}, headers=auth))


def test_calls_beyond_the_workers_cap_are_refused_while_the_provider_hangs(
    provider_app, provider, waits, auth
):
    embedder = provider_app.extensions["memsvc"].embedder
    cap = embedder.max_concurrency
    release = threading.Event()
    entered = threading.Semaphore(0)

    def hang(request: t.Any) -> tuple[int, dict[str, str], str]:
        entered.release()
        release.wait(30)
        return 200, {}, json.dumps(GOOD)

    provider.add_callback(responses.POST, ENDPOINT, callback=hang)
    statuses: list[int] = []

    def add(i: int) -> None:
        client = provider_app.test_client()
        resp = mutate(client, "memory.add", {"userId": "u", "content": f"slow {i}"}, headers=auth)
        statuses.append(resp.status_code)

    threads = [threading.Thread(target=add, args=(i,), daemon=True) for i in range(cap)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(cap):
            assert entered.acquire(timeout=30), "the provider never saw the waiting calls"
        client = provider_app.test_client()
        resp = mutate(client, "memory.add", {"userId": "u", "content": "one more"}, headers=auth)
        error = assert_error(resp, 503, "SERVICE_UNAVAILABLE", "memory.add")
        assert "embedding provider busy" in error["message"]
        assert resp.headers["Retry-After"] == "1"
        # Reads never wait on the provider.
        assert data(query(client, "memory.getAll", {"userId": "u"}, headers=auth)) == []
        assert client.get("/health").status_code == 200
    finally:
        release.set()
        for thread in threads:
            thread.join(30)
    assert statuses == [200] * cap
    listed = data(query(provider_app.test_client(), "memory.getAll", {"userId": "u"}, headers=auth))
    assert sorted(m["content"] for m in listed) == sorted(f"slow {i}" for i in range(cap))
