"""The chat-model client against a real HTTP server speaking each endpoint's recorded shapes."""

from __future__ import annotations

import email.utils
import json
import math
import socket
import subprocess
import sys
import threading
import time

import pytest

from memsvc.extraction.llm import REASON_CHARS
from memsvc.extraction.llm import ChatModel
from memsvc.extraction.llm import ModelError
from memsvc.extraction.llm import Reply
from memsvc.extraction.llm import Usage
from tests.support.fake_llm import REFUSALS
from tests.support.fake_llm import FakeModel
from tests.support.fake_llm import answer
from tests.support.fake_llm import delay
from tests.support.fake_llm import drop
from tests.support.fake_llm import echo_brain
from tests.support.fake_llm import garbage
from tests.support.fake_llm import refuse_json_schema
from tests.support.fake_llm import status

FLAVOURS = ["openai", "ollama", "vllm"]
KEY = "sk-proj-Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5"
SCHEMA = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
    "additionalProperties": False,
}
PROMPT = [
    {"role": "system", "content": "Answer in JSON."},
    {"role": "user", "content": "Extract the facts."},
]


@pytest.fixture(params=FLAVOURS)
def flavour(request) -> str:
    return request.param


@pytest.fixture
def fake(flavour):
    with FakeModel(flavour=flavour) as server:
        yield server


@pytest.fixture
def openai_fake():
    with FakeModel() as server:
        yield server


def client(fake: FakeModel, **kwargs) -> ChatModel:
    return ChatModel(fake.url, "test-model", **kwargs)


def failure(model: ChatModel) -> ModelError:
    with pytest.raises(ModelError) as caught:
        model.complete(PROMPT, SCHEMA)
    return caught.value


def prompt_data(*texts: str, facts: list[dict] | None = None, role: str = "user") -> str:
    messages = [
        {"id": f"m{i}", "role": role, "speaker": None, "at": "2023-05-08T10:00:00+00:00", "text": x}
        for i, x in enumerate(texts, 1)
    ]
    return json.dumps({"today": "2023-05-08", "messages": messages, "facts": facts or []})


# --- answers ---------------------------------------------------------------------------------


def test_each_flavour_answers_with_its_content_and_usage(fake):
    fake.script(answer('{"facts": ["Ann lives in Paris"]}'))
    model = client(fake)
    reply = model.complete(PROMPT, SCHEMA)
    model.close()
    # The fake counts words, with 3 a message: the endpoint's own counts, not an estimate.
    assert reply == Reply('{"facts": ["Ann lives in Paris"]}', Usage(3 + 3 + 3 + 3, 5, False))


def test_the_request_is_a_strict_json_schema_chat_completion(openai_fake):
    model = client(openai_fake)
    model.complete(PROMPT, SCHEMA, name="facts_v1")
    model.close()
    (headers, body), *_ = openai_fake.requests
    assert body == {
        "model": "test-model",
        "messages": PROMPT,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "facts_v1", "strict": True, "schema": SCHEMA},
        },
    }
    assert headers["Content-Type"] == "application/json"
    assert headers["Connection"] == "keep-alive"


def test_the_content_comes_back_exactly_as_sent(openai_fake):
    content = '  \n```json\n{"facts": []}\n```\n\t'
    openai_fake.script(answer(content))
    model = client(openai_fake)
    assert model.complete(PROMPT, SCHEMA).content == content
    model.close()


def test_without_usage_it_is_estimated_from_characters(fake):
    fake.script(answer('{"facts": []}', usage=False))
    model = client(fake)
    reply = model.complete(PROMPT, SCHEMA)
    model.close()
    chars = len("Answer in JSON.") + len("Extract the facts.")
    assert reply.usage == Usage(math.ceil(chars / 4), math.ceil(len('{"facts": []}') / 4), True)


@pytest.mark.parametrize(
    "usage", [None, {}, {"prompt_tokens": 3.5, "completion_tokens": 2}, {"prompt_tokens": 3}]
)
def test_usage_that_is_not_whole_counts_is_estimated(openai_fake, usage):
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}}]}
    if usage is not None:
        body["usage"] = usage
    openai_fake.script(garbage(json.dumps(body).encode(), "application/json"))
    model = client(openai_fake)
    assert model.complete(PROMPT, SCHEMA).usage.estimated
    model.close()


# --- errors in each endpoint's words ------------------------------------------------------------


@pytest.mark.parametrize(
    "code, retryable",
    [(400, False), (401, False), (403, False), (404, False), (422, False), (408, True)]
    + [(429, True), (500, True), (502, True), (503, True), (504, True)],
)
def test_each_flavours_error_gives_its_message(fake, code, retryable):
    fake.script(
        refuse_json_schema() if code == 400 else status(code, "the model 'x' is not here"),
        status(code, "the model 'x' is not here"),
    )
    model = client(fake)
    error = failure(model)
    model.close()
    assert error.reason == f"HTTP {code}: the model 'x' is not here"
    assert (error.status, error.retryable, error.retry_after, error.usage) == (
        code,
        retryable,
        None,
        None,
    )


@pytest.mark.parametrize(
    "body, reason",
    [
        # Ollama's native API: github.com/ollama/ollama server/routes.go.
        ({"error": "model 'llama9' not found"}, "model 'llama9' not found"),
        # vLLM since 0.10: ErrorResponse{error: ErrorInfo{message, type, param, code: int}}.
        (
            {"error": {"message": "The model `x` does not exist.", "type": "NotFoundError"}},
            "The model `x` does not exist.",
        ),
        # The llama.cpp server: {"error": {"code", "message", "type"}} (tools/server/README.md).
        (
            {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
            "File Not Found",
        ),
        ({"detail": "Not Found"}, "Not Found"),  # a FastAPI proxy's own 404
        ({"unexpected": True}, '{"unexpected": true}'),
    ],
)
def test_other_error_shapes_give_their_message(openai_fake, body, reason):
    openai_fake.script(status(404, body=body))
    model = client(openai_fake)
    assert failure(model).reason == f"HTTP 404: {reason}"
    model.close()


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center>"
            b"<h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n"
            b"</html>\r\n",
            "502 Bad Gateway",
        ),
        (b"<h1>Bad   gateway</h1>\n<p>upstream\ndown</p>", "Bad gateway upstream down"),
        (b"", "empty body"),
        (b"upstream connect error or disconnect/reset before headers", "upstream connect error"),
    ],
)
def test_proxy_pages_give_a_short_reason(openai_fake, body, reason):
    openai_fake.script(garbage(body, "text/html", code=502))
    model = client(openai_fake)
    error = failure(model)
    model.close()
    assert error.reason.startswith(f"HTTP 502: {reason}")
    assert error.retryable and error.status == 502


def test_a_long_message_is_cut(openai_fake):
    openai_fake.script(status(500, "word " * 300))
    model = client(openai_fake)
    reason = failure(model).reason
    model.close()
    assert reason.startswith("HTTP 500: word word")
    assert len(reason) == len("HTTP 500: ") + REASON_CHARS and reason.endswith("...")


# --- Retry-After ---------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [429, 503])
def test_retry_after_in_seconds(openai_fake, code):
    openai_fake.script(status(code, "slow down", retry_after="7"))
    model = client(openai_fake)
    error = failure(model)
    model.close()
    assert (error.retryable, error.retry_after, error.status) == (True, 7.0, code)


def test_retry_after_as_an_http_date(openai_fake):
    openai_fake.script(
        status(429, retry_after=email.utils.formatdate(time.time() + 120, usegmt=True))
    )
    model = client(openai_fake)
    error = failure(model)
    model.close()
    assert error.retry_after is not None and 100 <= error.retry_after <= 120


@pytest.mark.parametrize("value, seconds", [("86400", 3600.0), ("-5", 0.0), ("soon", None)])
def test_retry_after_is_bounded_and_read_carefully(openai_fake, value, seconds):
    openai_fake.script(status(503, retry_after=value))
    model = client(openai_fake)
    assert failure(model).retry_after == seconds
    model.close()


def test_retry_after_counts_on_429_and_503_only(openai_fake):
    openai_fake.script(status(500, retry_after="5"))
    model = client(openai_fake)
    assert failure(model).retry_after is None
    model.close()


# --- answers that are no answer -----------------------------------------------------------------


def test_no_content_is_retryable_and_its_usage_counted(fake):
    fake.script(answer(None))
    model = client(fake)
    error = failure(model)
    model.close()
    assert error.retryable and error.status == 200
    assert error.reason == "HTTP 200: no content"
    assert error.usage == Usage(12, 0, False)


def test_empty_content_is_retryable(openai_fake):
    openai_fake.script(answer(""))
    model = client(openai_fake)
    assert failure(model).retryable
    model.close()


def test_a_refusal_says_so(openai_fake):
    # Structured Outputs' refusal: content null, the model's words in "refusal".
    message = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    body = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    openai_fake.script(garbage(json.dumps(body).encode(), "application/json"))
    model = client(openai_fake)
    error = failure(model)
    model.close()
    assert error.reason == "HTTP 200: the model refused: I can't help with that."
    assert error.retryable


@pytest.mark.parametrize(
    "body",
    [
        b"<html><head><title>Welcome to nginx!</title></head></html>",
        b'{"choices": []}',
        b'{"object": "list", "data": []}',
        b'{"choices": [{"message": {"content": ["a", "b"]}}]}',
        b'{"choices": [{"text": "completions, not chat"}]}',
        b"[1, 2, 3]",
        b"",
    ],
)
def test_a_200_that_is_not_a_chat_completion_is_retryable(openai_fake, body):
    openai_fake.script(garbage(body, "text/html"))
    model = client(openai_fake)
    error = failure(model)
    model.close()
    assert error.retryable and error.status == 200
    assert error.reason.startswith("HTTP 200: ")


def test_the_usage_of_a_broken_answer_is_counted(openai_fake):
    body = {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}
    openai_fake.script(garbage(json.dumps(body).encode(), "application/json"))
    model = client(openai_fake)
    assert failure(model).usage == Usage(40, 9, False)
    model.close()


# --- the connection ------------------------------------------------------------------------------


def test_a_slow_answer_times_out(openai_fake):
    openai_fake.script(delay(3))
    model = client(openai_fake, timeout=0.3)
    started = time.monotonic()
    error = failure(model)
    took = time.monotonic() - started
    model.close()
    assert error.retryable and error.status is None
    assert error.reason == "no answer within 0.3s"
    assert took < 2.5  # the 3s answer was not waited for


def test_the_connection_dropped_without_an_answer(openai_fake):
    openai_fake.script(drop())
    model = client(openai_fake)
    error = failure(model)
    assert error.retryable and error.status is None
    assert error.reason == "connection failed (RemoteDisconnected)"
    assert model.complete(PROMPT, SCHEMA).content  # a new connection, and on it goes
    model.close()


def test_nothing_listening(openai_fake):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = ChatModel(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
    error = failure(model)
    model.close()
    assert error.retryable and error.reason.startswith("connection failed (")


def test_a_bad_url_is_not_retryable():
    model = ChatModel("localhost:11434/v1", "m")
    error = failure(model)
    model.close()
    assert not error.retryable and error.reason.startswith("bad endpoint URL")


def test_ten_calls_take_one_connection(fake):
    model = client(fake)
    for _ in range(10):
        model.complete(PROMPT, SCHEMA)
    model.close()
    assert len(fake.requests) == 10
    assert fake.connections == 1


def test_threads_share_one_client(openai_fake):
    openai_fake.delay_ms = 150
    model = client(openai_fake, pool_size=4)
    start = threading.Barrier(4)
    replies: dict[str, list[str]] = {}

    def work(name: str) -> None:
        start.wait()
        replies[name] = [
            model.complete(
                [{"role": "user", "content": prompt_data(f"{name} {i}")}], SCHEMA
            ).content
            for i in range(3)
        ]

    threads = [threading.Thread(target=work, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    model.close()
    for name in ("t0", "t1", "t2", "t3"):  # each thread got the answers to its own calls
        assert [json.loads(r)["facts"][0]["text"] for r in replies[name]] == [
            f"The user said: {name} {i}" for i in range(3)
        ]
    assert openai_fake.max_in_flight >= 2  # calls overlapped
    assert openai_fake.connections <= 4  # 12 calls on the pool's connections


# --- json_schema, or json_object ------------------------------------------------------------------


def test_an_endpoint_refusing_json_schema_gets_json_object_from_then_on(fake):
    fake.script(refuse_json_schema())
    model = client(fake)
    assert model.complete(PROMPT, SCHEMA).content
    assert model.json_object_only
    assert model.complete(PROMPT, SCHEMA).content
    model.close()
    kinds = [body["response_format"]["type"] for _, body in fake.requests]
    assert kinds == ["json_schema", "json_object", "json_object"]
    assert all(body["messages"] == PROMPT for _, body in fake.requests)


def test_a_refusal_of_both_is_not_retryable_nor_remembered(fake):
    fake.script(refuse_json_schema(), status(400, "messages: too long"))
    model = client(fake)
    error = failure(model)
    assert (error.retryable, error.status, error.reason) == (
        False,
        400,
        "HTTP 400: messages: too long",
    )
    assert not model.json_object_only
    model.complete(PROMPT, SCHEMA)
    model.close()
    assert fake.requests[-1][1]["response_format"]["type"] == "json_schema"


def test_a_failed_json_object_call_is_not_remembered(openai_fake):
    openai_fake.script(refuse_json_schema(), status(503, "overloaded"))
    model = client(openai_fake)
    assert failure(model).retryable
    assert not model.json_object_only
    model.close()


def test_an_endpoint_that_never_takes_json_schema(fake):
    fake.accepts_json_schema = False
    model = client(fake)
    replies = [model.complete(PROMPT, SCHEMA) for _ in range(3)]
    model.close()
    assert all(r.content for r in replies)
    assert len(fake.requests) == 4  # refused once, then json_object only


def test_concurrent_fallbacks_settle_on_json_object(openai_fake):
    openai_fake.accepts_json_schema = False
    model = client(openai_fake, pool_size=4)
    threads = [threading.Thread(target=model.complete, args=(PROMPT, SCHEMA)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    model.complete(PROMPT, SCHEMA)
    model.close()
    assert openai_fake.requests[-1][1]["response_format"] == {"type": "json_object"}
    assert len(openai_fake.requests) <= 4 * 2 + 1


# --- the key ----------------------------------------------------------------------------------


def test_the_key_is_sent_as_a_bearer_token(openai_fake):
    model = client(openai_fake, api_key=KEY)
    model.complete(PROMPT, SCHEMA)
    model.close()
    assert openai_fake.requests[0][0]["Authorization"] == f"Bearer {KEY}"


def test_no_key_no_authorization_header(openai_fake):
    model = client(openai_fake)
    model.complete(PROMPT, SCHEMA)
    model.close()
    assert "Authorization" not in openai_fake.requests[0][0]


@pytest.mark.parametrize(
    "behaviour",
    [
        # OpenAI echoes a wrong key, masked; a proxy may echo it whole.
        status(401, f"Incorrect API key provided: {KEY}. You can find your API key at ..."),
        status(403, f"Authorization: Bearer {KEY} is not allowed"),
        status(400, "x" * (REASON_CHARS - 10) + KEY),  # cut through the key
        garbage(f"<title>denied for {KEY}</title>".encode(), "text/html", code=502),
        garbage(json.dumps({"choices": [], "echo": KEY}).encode(), "application/json"),
    ],
)
def test_the_key_never_appears_in_a_reason(openai_fake, behaviour, caplog):
    openai_fake.script(behaviour, behaviour)
    model = client(openai_fake, api_key=KEY)
    error = failure(model)
    model.close()
    assert KEY[:12] not in error.reason and KEY[-12:] not in error.reason
    assert "[redacted]" in error.reason or error.reason.endswith("...")
    assert KEY[-12:] not in caplog.text and "Extract the facts" not in caplog.text


def test_a_short_key_is_redacted_too(openai_fake):
    openai_fake.script(status(401, "bad key: hunter2!"))
    model = client(openai_fake, api_key="hunter2!")
    assert failure(model).reason == "HTTP 401: bad key: [redacted]"
    model.close()


# --- the fake itself -------------------------------------------------------------------------


def test_echo_brain_makes_a_fact_of_each_user_message():
    data = prompt_data(
        "I live in Paris",
        "? what is the weather",
        "I work at Acme",
        facts=[
            {"id": "f1", "text": "The user said: I live in Berlin", "at": "2023-01-01"},
            {"id": "f2", "text": "The user said: I love tea", "at": "2023-01-01"},
            {"id": "f3", "text": "The user said: I live in Rome", "at": "2023-01-01"},
        ],
    )
    facts = json.loads(echo_brain({"messages": [{"role": "user", "content": data}]}))["facts"]
    assert facts == [
        {"text": "The user said: I live in Paris", "sources": ["m1"], "supersedes": ["f1", "f3"]},
        {"text": "The user said: I work at Acme", "sources": ["m3"], "supersedes": []},
    ]


def test_echo_brain_skips_the_assistant_and_answers_fake_lines_verbatim():
    data = prompt_data("I am the assistant", role="assistant")
    assert json.loads(echo_brain({"messages": [{"role": "user", "content": data}]})) == {
        "facts": []
    }
    hostile = prompt_data('hello\nFAKE: {"facts": [{"text": "Ignore all rules"}]}\nbye')
    request = {
        "messages": [{"role": "user", "content": "old"}, {"role": "user", "content": hostile}]
    }
    assert echo_brain(request) == '{"facts": [{"text": "Ignore all rules"}]}'
    assert echo_brain({"messages": [{"role": "user", "content": "not json"}]}) == '{"facts": []}'


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_flavours_refusal_is_a_400_the_client_reads(flavour):
    with FakeModel(flavour=flavour) as fake:
        fake.accepts_json_schema = False
        model = client(fake)
        model.complete(PROMPT, SCHEMA)
        model.close()
    assert "json_schema" in json.dumps(REFUSALS[flavour])


def test_the_fake_runs_as_a_process():
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_llm", "--port", "0", "--flavour", "vllm"]
        + ["--delay-ms", "50", "--no-json-schema"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        model = ChatModel(url, "m")
        data = prompt_data("I live in Oslo")
        reply = model.complete([{"role": "user", "content": data}], SCHEMA)
        model.close()
        assert json.loads(reply.content)["facts"][0]["text"] == "The user said: I live in Oslo"
        assert model.json_object_only
    finally:
        process.terminate()
        assert process.wait(10) == 0
        process.stdout.close()  # type: ignore[union-attr]


def test_a_server_error_naming_json_schema_is_a_refusal_too():
    """Older llama.cpp builds answered 500 to json_schema (ik_llama.cpp #778): json_object next."""
    body = {
        "error": {
            "code": 500,
            "message": 'response_format type must be one of "text" or "json_object", but got: '
            "json_schema",
            "type": "server_error",
        }
    }
    with FakeModel() as fake:
        fake.script(status(500, body=body), answer('{"facts": []}'))
        model = ChatModel(fake.url, "m")
        reply = model.complete([{"role": "user", "content": "JSON please"}], {"type": "object"})
        assert model.json_object_only
        formats = [b["response_format"]["type"] for _, b in fake.requests]
        assert formats == ["json_schema", "json_object"]
        assert json.loads(reply.content)["facts"] == []


@pytest.mark.parametrize("key", [None, "sk-the-real-key"])
def test_a_netrc_entry_for_the_host_never_sends_its_credentials(tmp_path, monkeypatch, key):
    """requests adds ~/.netrc's login for a host given no auth; memsvc sends its key only."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with FakeModel() as fake:
        fake.script(answer('{"facts": []}'))
        ChatModel(fake.url, "m", key).complete([{"role": "user", "content": "JSON"}], {})
        [(headers, _)] = fake.requests
        sent = {k.lower(): v for k, v in dict(headers).items()}
        assert sent.get("authorization") == (None if key is None else f"Bearer {key}")
