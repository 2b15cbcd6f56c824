import json

import numpy as np
import pytest
import requests
import responses

from memsvc.embeddings import InputTooLong
from memsvc.embeddings import ProviderBusy
from memsvc.embeddings import ProviderError
from memsvc.embeddings.openai import OpenAIEmbedder
from memsvc.errors import BadRequest

URL = "https://embeddings.test/v1"
ENDPOINT = URL + "/embeddings"
API_KEY = "sk-provider-secret-123"


@pytest.fixture
def embedder():
    e = OpenAIEmbedder(
        url=URL, api_key=API_KEY, model="text-embedding-3-small", dimensions=4, timeout=2
    )
    e.waits = []
    e.sleep = e.waits.append
    return e


def ok(vectors, shuffle=False):
    items = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    if shuffle:
        items.reverse()
    return {"object": "list", "data": items, "model": "text-embedding-3-small"}


@responses.activate
def test_posts_model_input_dimensions_and_bearer_key(embedder):
    responses.post(ENDPOINT, json=ok([[3, 4, 0, 0]]))
    [v] = embedder.embed(["hello"])
    call = responses.calls[0]
    assert json.loads(call.request.body) == {
        "model": "text-embedding-3-small",
        "input": ["hello"],
        "dimensions": 4,
    }
    assert call.request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert np.allclose(v, [0.6, 0.8, 0, 0])  # scaled to unit length


@responses.activate
def test_rows_come_back_in_input_order(embedder):
    responses.post(ENDPOINT, json=ok([[1, 0, 0, 0], [0, 1, 0, 0]], shuffle=True))
    a, b = embedder.embed(["a", "b"])
    assert np.allclose(a, [1, 0, 0, 0]) and np.allclose(b, [0, 1, 0, 0])


@responses.activate
def test_models_without_dimensions_support_are_not_sent_it():
    e = OpenAIEmbedder(url=URL, api_key=None, model="nomic-embed-text", dimensions=4)
    responses.post(ENDPOINT, json=ok([[1, 0, 0, 0]]))
    e.embed(["x"])
    sent = responses.calls[0].request
    assert "dimensions" not in json.loads(sent.body)
    assert "Authorization" not in sent.headers


@responses.activate
def test_connections_are_reused(embedder):
    responses.post(ENDPOINT, json=ok([[1, 0, 0, 0]]))
    session = embedder._session()
    embedder.embed(["x"])
    embedder.embed(["y"])
    assert embedder._session() is session


@responses.activate
@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_retries_transient_failures_then_succeeds(embedder, status):
    responses.post(ENDPOINT, status=status, json={"error": {"message": "busy"}})
    responses.post(ENDPOINT, json=ok([[1, 0, 0, 0]]))
    embedder.embed(["x"])
    assert len(responses.calls) == 2
    assert len(embedder.waits) == 1 and 0 < embedder.waits[0] <= 0.5


@responses.activate
def test_gives_up_after_the_retry_budget(embedder):
    responses.post(ENDPOINT, status=503)
    with pytest.raises(ProviderError, match="HTTP 503 .after 3 attempts") as e:
        embedder.embed(["x"])
    assert e.value.code == "INTERNAL_SERVER_ERROR"
    assert len(responses.calls) == 3
    assert len(embedder.waits) == 2
    assert embedder.waits[1] > 0.25  # exponential: the second wait is longer on average


@responses.activate
def test_honours_retry_after(embedder):
    responses.post(ENDPOINT, status=429, headers={"Retry-After": "2"})
    responses.post(ENDPOINT, json=ok([[1, 0, 0, 0]]))
    embedder.embed(["x"])
    assert embedder.waits == [2.0]


@responses.activate
def test_a_long_retry_after_fails_at_once(embedder):
    responses.post(ENDPOINT, status=429, headers={"Retry-After": "120"})
    with pytest.raises(ProviderError, match="busy for 120s"):
        embedder.embed(["x"])
    assert len(responses.calls) == 1
    assert embedder.waits == []


@responses.activate
def test_timeouts_are_retried_then_reported(embedder):
    responses.post(ENDPOINT, body=requests.exceptions.ReadTimeout("slow"))
    with pytest.raises(ProviderError, match="no answer within 2s"):
        embedder.embed(["x"])
    assert len(responses.calls) == 3


@responses.activate
def test_connection_errors_are_retried(embedder):
    responses.post(ENDPOINT, body=requests.exceptions.ConnectionError("refused"))
    responses.post(ENDPOINT, json=ok([[1, 0, 0, 0]]))
    embedder.embed(["x"])
    assert len(responses.calls) == 2


@responses.activate
def test_over_long_input_is_a_bad_request(embedder):
    message = (
        "This model's maximum context length is 8192 tokens, however you requested "
        "9000 tokens. Please reduce your prompt."
    )
    responses.post(ENDPOINT, status=400, json={"error": {"message": message}})
    with pytest.raises(InputTooLong, match="too long for the embedding model") as e:
        embedder.embed(["x" * 40000])
    assert e.value.code == "BAD_REQUEST"
    assert len(responses.calls) == 1


@responses.activate
@pytest.mark.parametrize(
    "message",
    ["unexpected token '<' in input", "invalid token id 50257", "tokenizer failed on input"],
)
def test_a_rejection_that_merely_mentions_tokens_is_not_called_too_long(embedder, message):
    responses.post(ENDPOINT, status=400, json={"error": {"message": message}})
    with pytest.raises(BadRequest) as e:
        embedder.embed(["x"])
    assert not isinstance(e.value, InputTooLong)
    assert e.value.message == f"the embedding provider rejected the text: {message}"


@responses.activate
@pytest.mark.parametrize(
    "echo",
    [
        f"Invalid request; headers were Authorization: Bearer {API_KEY}",
        f"key {API_KEY} is not allowed to embed",
        "bad input; your key sk-proj-AbCdEf0123456789XyZ is rate limited",
        "request id 9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddccbbaa rejected",
    ],
)
def test_a_providers_rejection_is_passed_on_without_anything_credential_shaped(embedder, echo):
    responses.post(ENDPOINT, status=400, json={"error": {"message": echo}})
    with pytest.raises(BadRequest) as e:
        embedder.embed(["x"])
    assert API_KEY not in e.value.message and "sk-proj" not in e.value.message
    assert "[redacted]" in e.value.message
    assert "9f8e7d6c5b4a39281706f5e4d3c2b1a0" not in e.value.message


@responses.activate
def test_other_rejections_are_bad_requests_too(embedder):
    responses.post(ENDPOINT, status=400, json={"error": {"message": "input must not be empty"}})
    with pytest.raises(BadRequest, match="rejected the text: input must not be empty"):
        embedder.embed([""])


@responses.activate
@pytest.mark.parametrize("status", [401, 403, 404])
def test_configuration_failures_are_not_retried(embedder, status):
    responses.post(ENDPOINT, status=status, json={"error": {"message": "bad key sk-..."}})
    with pytest.raises(ProviderError, match=f"HTTP {status}"):
        embedder.embed(["x"])
    assert len(responses.calls) == 1


@responses.activate
@pytest.mark.parametrize(
    "body, match",
    [
        ("not json", "not JSON"),
        (json.dumps({"data": []}), "expected 1 vector"),
        (json.dumps({"nope": 1}), "no data"),
        (json.dumps(ok([[1, 0, 0]])), "of 4 dimensions"),
        (json.dumps(ok([[1, 0, 0, "x"]])), "not lists of numbers"),
        ('{"data":[{"index":0,"embedding":[NaN,0,0,1]}]}', "NaN or infinite"),
        ('{"data":[{"index":0,"embedding":[Infinity,0,0,1]}]}', "NaN or infinite"),
        (json.dumps(ok([[0, 0, 0, 0]])), "all-zero"),
    ],
)
def test_malformed_answers_are_provider_errors(embedder, body, match):
    responses.post(ENDPOINT, body=body, content_type="application/json")
    with pytest.raises(ProviderError, match=match):
        embedder.embed(["x"])


@responses.activate
def test_the_provider_key_never_appears_in_errors(embedder, caplog):
    responses.post(ENDPOINT, status=500, body=f"echo {API_KEY}")
    with pytest.raises(ProviderError) as e:
        embedder.embed(["x"])
    assert API_KEY not in str(e.value)
    assert API_KEY not in caplog.text


@responses.activate
def test_the_breaker_stops_calling_a_failing_provider_then_probes(embedder):
    now = [1000.0]
    embedder.clock = lambda: now[0]
    responses.post(ENDPOINT, status=503)
    for _ in range(embedder.BREAKER_FAILURES):
        with pytest.raises(ProviderError, match="HTTP 503"):
            embedder.embed(["x"])
    calls = len(responses.calls)
    with pytest.raises(ProviderError, match="calls in a row failed; not calling it for 10s"):
        embedder.embed(["x"])
    assert len(responses.calls) == calls  # failed at once, provider left alone
    now[0] += embedder.BREAKER_SECONDS
    responses.replace(responses.POST, ENDPOINT, json=ok([[1, 0, 0, 0]]))
    embedder.embed(["x"])  # the probe succeeds and closes the breaker
    embedder.embed(["y"])
    assert len(responses.calls) == calls + 2


@responses.activate
def test_rejected_text_does_not_trip_the_breaker(embedder):
    responses.post(ENDPOINT, status=400, json={"error": {"message": "too long"}})
    for _ in range(embedder.BREAKER_FAILURES + 2):
        with pytest.raises(InputTooLong):
            embedder.embed(["x"])
    assert len(responses.calls) == embedder.BREAKER_FAILURES + 2


def test_at_most_max_concurrency_calls_wait_on_the_provider():
    import threading

    from tests.support.fake_provider import FakeProvider

    with FakeProvider(delay=4.0, dimensions=4) as provider:
        e = OpenAIEmbedder(
            url=provider.url, api_key=None, model="m", dimensions=4, max_concurrency=2, timeout=6
        )
        results = []
        started = threading.Barrier(3)

        def call():
            started.wait()
            try:
                e.embed(["slow one"])
                results.append("ok")
            except ProviderError as err:
                results.append(str(err))

        threads = [threading.Thread(target=call) for _ in range(2)]
        for th in threads:
            th.start()
        started.wait()
        import time

        time.sleep(e.slow_call + 0.2)  # both have been inside the provider call too long
        t0 = time.monotonic()
        with pytest.raises(ProviderBusy, match="busy: 2 calls from this worker") as busy:
            e.embed(["third"])
        assert busy.value.status == 503 and busy.value.headers == {"Retry-After": "1"}
        assert time.monotonic() - t0 < 0.2  # the provider is slow: refused at once
        for th in threads:
            th.join()
        assert results == ["ok", "ok"]
        assert provider.peak["slow"] == 2


def test_a_call_waits_briefly_for_a_slot_while_the_provider_is_quick():
    import threading

    from tests.support.fake_provider import FakeProvider

    with FakeProvider(delay=0.05, dimensions=4) as provider:
        e = OpenAIEmbedder(
            url=provider.url, api_key=None, model="m", dimensions=4, max_concurrency=2
        )
        failures = []

        def burst():
            for i in range(10):
                try:
                    e.embed([f"quick {i}"])
                except ProviderBusy as err:
                    failures.append(err)

        # One thread more than the slots, as a worker has (4 threads, 3 slots).
        threads = [threading.Thread(target=burst) for _ in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert failures == []
        assert provider.peak["quick"] <= 2
