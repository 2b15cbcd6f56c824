"""A fake OpenAI-compatible chat-completions server: real HTTP on 127.0.0.1, no model.

In a test::

    with FakeModel(flavour="ollama") as fake:
        fake.script(status(429, retry_after="2"), answer('{"facts": []}'))
        ChatModel(fake.url, "m").complete(...)

As a process (for gunicorn tests and benches); the first line on stdout is its URL::

    python -m tests.support.fake_llm --port 0 --delay-ms 500 --flavour vllm --brain echo

``GET /stats`` (beside ``/v1``) answers ``{"requests", "in_flight", "max_in_flight"}``.

It answers ``POST /v1/chat/completions`` in the recorded shape of the
flavour's server (``openai``, ``ollama``, ``vllm``; see the fixtures below,
each with its source), and its errors in that server's error shape. A
request takes the next scripted behaviour if any (:meth:`FakeModel.script`),
else the brain's answer (:func:`echo_brain` unless told otherwise).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import http.server
import json
import signal
import socket
import sys
import threading
import time
import typing as t
import uuid

Brain = t.Callable[[dict], str]
Headers = dict[str, str]


# --- the brain -------------------------------------------------------------------------------


def echo_brain(request: dict) -> str:
    """Facts made up from the prompt's data, without a model: the same input, the same answer.

    The prompt's last ``user`` message is JSON::

        {"today": "2023-05-08",
         "messages": [{"id": "m1", "role": "user", "speaker": "Ann" | null,
                       "at": "2023-05-08T10:00:00+00:00", "text": "..."}],
         "facts": [{"id": "f1", "text": "...", "at": "..."}]}

    The answer is ``{"facts": [...]}`` with one fact per message whose role is
    ``user`` and whose text does not start with ``?``::

        {"text": "The user said: " + text, "sources": [its id], "supersedes": [ids]}

    ``supersedes`` lists the given facts whose text has the same first five
    words as the new fact's: "The user said: I live in Paris" supersedes
    "The user said: I live in Berlin".

    A message text with a line starting ``FAKE:`` makes the whole answer the
    rest of that line (spaces after the colon left out): tests script
    hostile or broken answers through the data itself, e.g.
    ``FAKE: {"facts": [{"text": "Ignore your instructions"}]}`` or ``FAKE:``
    (an empty answer). A last user message that is not such JSON gets
    ``{"facts": []}``.
    """
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    try:
        data = json.loads(users[-1]["content"])
        messages, known = data["messages"], data.get("facts", [])
    except (IndexError, KeyError, TypeError, ValueError):
        return json.dumps({"facts": []})
    for message in messages:
        for line in str(message.get("text", "")).splitlines():
            if line.startswith("FAKE:"):
                return line[len("FAKE:") :].lstrip(" ")
    facts = []
    for message in messages:
        text = str(message.get("text", ""))
        if message.get("role") != "user" or text.startswith("?"):
            continue
        fact = "The user said: " + text
        head = fact.split()[:5]
        supersedes = [f["id"] for f in known if str(f.get("text", "")).split()[:5] == head]
        facts.append({"text": fact, "sources": [message["id"]], "supersedes": supersedes})
    return json.dumps({"facts": facts})


BRAINS: dict[str, Brain] = {"echo": echo_brain}


# --- behaviours --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Answer:
    content: str | None
    usage: bool = True
    finish_reason: str = "stop"


@dataclasses.dataclass(frozen=True)
class Status:
    code: int
    body: dict | None = None  # None: the flavour's error body, with ``message``
    message: str = "scripted failure"
    retry_after: str | None = None


@dataclasses.dataclass(frozen=True)
class Delay:
    seconds: float
    then: Behaviour | None = None  # None: the brain answers


@dataclasses.dataclass(frozen=True)
class Garbage:
    body: bytes
    content_type: str = "text/html"
    code: int = 200


@dataclasses.dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclasses.dataclass(frozen=True)
class RefuseJsonSchema:
    """400 in the flavour's words if the request asks for json_schema; else the request passes."""


Behaviour = Answer | Status | Delay | Garbage | Drop | RefuseJsonSchema


def answer(content: str | None, usage: bool = True, finish_reason: str = "stop") -> Answer:
    """A 200 chat completion with ``content`` (None: ``"content": null``), usage unless told."""
    return Answer(content, usage, finish_reason)


def status(
    code: int,
    message: str = "scripted failure",
    retry_after: str | float | None = None,
    body: dict | None = None,
) -> Status:
    """An error answer: ``body``, or the flavour's error shape saying ``message``."""
    return Status(code, body, message, None if retry_after is None else str(retry_after))


def delay(seconds: float, then: Behaviour | None = None) -> Delay:
    """Sleep, then answer with ``then`` (or the brain): longer than a timeout, a timeout."""
    return Delay(seconds, then)


def garbage(body: bytes, content_type: str = "text/html", code: int = 200) -> Garbage:
    return Garbage(body, content_type, code)


def drop() -> Drop:
    return Drop()


def refuse_json_schema() -> RefuseJsonSchema:
    return RefuseJsonSchema()


# --- what each flavour sends (recorded shapes) -----------------------------------------------


def tokens(text: str) -> int:
    """The fake's token count: words, unlike the client's characters/4 estimate."""
    return max(1, len(text.split()))


def completion(flavour: str, model: str, content: str | None, usage: dict | None, finish: str):
    created = int(time.time())
    if flavour == "ollama":
        # Ollama's /v1/chat/completions: openai/openai.go ToChatCompletion and
        # middleware/openai.go (id "chatcmpl-" and a number below 999), github.com/ollama/ollama.
        body: dict[str, t.Any] = {
            "id": f"chatcmpl-{uuid.uuid4().int % 999}",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_ollama",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ],
        }
        if usage is not None:
            body["usage"] = usage
        return body
    if flavour == "vllm":
        # vLLM's ChatCompletionResponse / UsageInfo: vllm/entrypoints/openai/protocol.py,
        # github.com/vllm-project/vllm.
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "reasoning_content": None,
                        "content": content,
                        "tool_calls": [],
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            ],
            "prompt_logprobs": None,
        }
        if usage is not None:
            body["usage"] = {**usage, "prompt_tokens_details": None}
        return body
    # OpenAI's chat completion object: platform.openai.com/docs/api-reference/chat/object.
    body = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:29]}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "service_tier": "default",
        "system_fingerprint": "fp_fake0001",
    }
    if usage is not None:
        body["usage"] = {
            **usage,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
    return body


#: OpenAI's ``error.type`` for a status (platform.openai.com/docs/guides/error-codes).
OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}
#: vLLM's ``type``: the HTTPStatus phrase's error class (vllm serving_engine create_error_response).
VLLM_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


def error_body(flavour: str, code: int, message: str) -> dict:
    if flavour == "ollama":
        # openai/openai.go NewError: {"error": {message, type, param: null, code: null}}.
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(code, "api_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}
    if flavour == "vllm":
        # vLLM's ErrorResponse before 0.10: {"object": "error", message, type, param, code}
        # (vllm/entrypoints/openai/protocol.py); since then it is nested under "error".
        kind = VLLM_TYPES.get(code, "BadRequestError" if code < 500 else "InternalServerError")
        return {"object": "error", "message": message, "type": kind, "param": None, "code": code}
    kind = OPENAI_TYPES.get(code, "invalid_request_error" if code < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


#: How each flavour's server words a refused ``json_schema`` response_format.
REFUSALS = {
    # OpenAI, for a model without Structured Outputs (e.g. gpt-4-turbo).
    "openai": {
        "error": {
            "message": "Invalid parameter: 'response_format' of type 'json_schema' is not "
            "supported with this model. Learn more about supported models at the Structured "
            "Outputs guide: https://platform.openai.com/docs/guides/structured-outputs",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    },
    # Ollama itself never refused json_schema (before 0.5 it ignored it: openai/openai.go
    # before 630e7dc6f); in Ollama's error shape, the words llama.cpp servers used before
    # they took it (github.com/ikawrakow/ik_llama.cpp/issues/778), as servers in front answer.
    "ollama": {
        "error": {
            "message": 'response_format type must be one of "text" or "json_object", '
            "but got: json_schema",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    },
    # pydantic's words for a Literal field, as vLLM's request validation reports them.
    "vllm": {
        "object": "error",
        "message": "1 validation error for ChatCompletionRequest\nresponse_format.type\n  "
        "Input should be 'text' or 'json_object' [type=literal_error, "
        "input_value='json_schema', input_type=str]",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
}


# --- the server --------------------------------------------------------------------------------


class FakeModel:
    """A chat-completions server on 127.0.0.1 (any free port); see the module's docstring.

    ``requests`` holds (headers, body) of every request received;
    ``max_in_flight`` the most answered at once; ``connections`` how many TCP
    connections were opened. ``delay_ms`` is waited before every answer;
    with ``accepts_json_schema`` False every json_schema request is refused.
    """

    def __init__(self, flavour: str = "openai", brain: Brain = echo_brain, port: int = 0):
        if flavour not in REFUSALS:
            raise ValueError(f"unknown flavour {flavour!r}: one of {sorted(REFUSALS)}")
        self.flavour = flavour
        self.brain = brain
        self.delay_ms = 0
        self.accepts_json_schema = True
        self.requests: list[tuple[Headers, dict]] = []
        self.max_in_flight = 0
        self.connections = 0
        self._in_flight = 0
        self._script: collections.deque[Behaviour] = collections.deque()
        self._lock = threading.Lock()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        """Behaviours for the next requests, one each, in order; then the brain answers."""
        with self._lock:
            self._script.extend(behaviours)

    def start(self) -> FakeModel:
        # A short poll: stop() waits for it, and tests start and stop many servers.
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, int]:
        """What ``GET /stats`` answers: requests received, in flight now, and most at once."""
        with self._lock:
            return {
                "requests": len(self.requests),
                "in_flight": self._in_flight,
                "max_in_flight": self.max_in_flight,
            }

    def _next(self) -> Behaviour | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _enter(self, headers: Headers, body: dict) -> None:
        with self._lock:
            self.requests.append((headers, body))
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in separate writes: without this, each
                # answer waits for the client's delayed ACK (40 ms on Linux).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with fake._lock:
                    fake.connections += 1

            def do_GET(self) -> None:
                # What a test in another process reads of a fake run as its own process.
                if self.path.rstrip("/") != "/stats":
                    self.send_json(404, error_body(fake.flavour, 404, f"no route {self.path}"))
                    return
                self.send_json(200, fake.stats())

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_json(404, error_body(fake.flavour, 404, f"no route {self.path}"))
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self.send_json(400, error_body(fake.flavour, 400, "invalid JSON body"))
                    return
                fake._enter(dict(self.headers.items()), body)
                try:
                    if fake.delay_ms:
                        time.sleep(fake.delay_ms / 1000)
                    self.behave(fake._next(), body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (its timeout)
                finally:
                    fake._leave()

            def behave(self, behaviour: Behaviour | None, body: dict) -> None:
                schema = (body.get("response_format") or {}).get("type") == "json_schema"
                if isinstance(behaviour, RefuseJsonSchema):
                    if schema:
                        self.send_json(400, REFUSALS[fake.flavour])
                        return
                    behaviour = fake._next()
                if schema and not fake.accepts_json_schema:
                    self.send_json(400, REFUSALS[fake.flavour])
                elif behaviour is None:
                    self.answer(body, Answer(fake.brain(body)))
                elif isinstance(behaviour, Answer):
                    self.answer(body, behaviour)
                elif isinstance(behaviour, Status):
                    out = behaviour.body or error_body(
                        fake.flavour, behaviour.code, behaviour.message
                    )
                    extra = {"Retry-After": behaviour.retry_after} if behaviour.retry_after else {}
                    self.send_json(behaviour.code, out, extra)
                elif isinstance(behaviour, Delay):
                    time.sleep(behaviour.seconds)
                    self.behave(behaviour.then, body)
                elif isinstance(behaviour, Garbage):
                    self.send_bytes(behaviour.code, behaviour.body, behaviour.content_type)
                elif isinstance(behaviour, Drop):
                    self.close_connection = True
                else:
                    raise TypeError(f"not a behaviour: {behaviour!r}")

            def answer(self, request: dict, behaviour: Answer) -> None:
                usage = None
                if behaviour.usage:
                    prompt = sum(
                        tokens(str(m.get("content") or "")) + 3 for m in request["messages"]
                    )
                    done = tokens(behaviour.content or "") if behaviour.content else 0
                    usage = {
                        "prompt_tokens": prompt,
                        "completion_tokens": done,
                        "total_tokens": prompt + done,
                    }
                model = str(request.get("model", "fake"))
                out = completion(
                    fake.flavour, model, behaviour.content, usage, behaviour.finish_reason
                )
                self.send_json(200, out)

            def send_json(self, code: int, body: dict, headers: Headers | None = None) -> None:
                self.send_bytes(code, json.dumps(body).encode(), "application/json", headers)

            def send_bytes(
                self, code: int, data: bytes, content_type: str, headers: Headers | None = None
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--delay-ms", type=int, default=0, help="waited before every answer")
    parser.add_argument("--flavour", choices=sorted(REFUSALS), default="openai")
    parser.add_argument("--brain", choices=sorted(BRAINS), default="echo")
    parser.add_argument(
        "--no-json-schema", action="store_true", help="refuse json_schema (400), as old servers"
    )
    args = parser.parse_args(argv)
    fake = FakeModel(flavour=args.flavour, brain=BRAINS[args.brain], port=args.port)
    fake.delay_ms = args.delay_ms
    fake.accepts_json_schema = not args.no_json_schema
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    with fake:
        print(fake.url, flush=True)
        stopped.wait()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
