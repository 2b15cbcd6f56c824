"""One call to an OpenAI-compatible ``POST {url}/chat/completions`` endpoint.

Works with OpenAI, Azure OpenAI's compatible endpoint, Ollama, vLLM, the
llama.cpp server and LiteLLM. Each :meth:`ChatModel.complete` is one
attempt: it never retries, since the caller retries durably (a job
queue), and tells it whether a retry may help (:attr:`ModelError.retryable`)
and when (:attr:`ModelError.retry_after`).

The answer is asked for as JSON in a schema (``response_format`` of type
``json_schema``). Servers without structured outputs refuse that with a 400,
each in its own words; the same request then goes once more with
``json_object``, and when that is answered this endpoint gets
``json_object`` from then on.

What the endpoint says when it fails is kept as a short reason, safe to
store and show: the API key is redacted from it even when the endpoint
echoes it, and neither the key nor the prompt is ever logged.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import logging
import math
import re
import threading
import time
import typing as t

import requests
from requests.adapters import HTTPAdapter

log = logging.getLogger(__name__)

#: A reason holds this much of the endpoint's own message.
REASON_CHARS = 200
#: The longest Retry-After passed on: an endpoint asking for more than an
#: hour is told to come back in an hour.
RETRY_AFTER_MAX = 3600.0
#: The largest answer read: a chat completion of extracted facts is a few
#: kilobytes; a bigger body is not one, and is not held in memory.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: Most seconds to wait for a connection, whatever the read timeout.
CONNECT_TIMEOUT = 10.0

_RETRY_STATUSES = frozenset({408, 429})
_RETRY_AFTER_STATUSES = frozenset({429, 503})
# Credentials an endpoint might echo back in its error text: bearer tokens,
# key-shaped strings (sk-..., long runs of key characters).
_SECRET_SHAPES = re.compile(
    r"(?i)\bbearer\s+\S+|\b(?:sk|pk|rk|key|api[_-]?key)[-_][A-Za-z0-9_\-]{8,}|[A-Za-z0-9_\-+/=]{32,}"
)
_TITLE = re.compile(r"(?is)<title[^>]*>(.*?)</title>")
_TAG = re.compile(r"(?s)<[^>]*>")
# Failures that retrying cannot mend: the URL itself is wrong.
_CONFIG_ERRORS = (
    requests.exceptions.InvalidURL,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.InvalidHeader,
)


@dataclasses.dataclass(frozen=True)
class Usage:
    """The tokens one call took."""

    prompt_tokens: int
    completion_tokens: int
    estimated: bool  # True when the endpoint sent no usage and memsvc estimated it


@dataclasses.dataclass(frozen=True)
class Reply:
    """A usable answer: ``choices[0].message.content``, as the endpoint sent it."""

    content: str
    usage: Usage


class ModelError(Exception):
    """A model call that gave no usable answer."""

    def __init__(
        self,
        reason: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        usage: Usage | None = None,
    ):
        super().__init__(reason)
        #: Short, safe to store and show: the status and the endpoint's message.
        self.reason = reason
        #: Whether the same call later may succeed (timeouts, 408, 429, 5xx,
        #: answers that are not a chat completion or have no content).
        self.retryable = retryable
        #: Seconds the endpoint asked to wait (Retry-After on 429/503).
        self.retry_after = retry_after
        self.status = status
        #: What the endpoint reported the call took, when it did.
        self.usage = usage


class ChatModel:
    """Chat completions from one endpoint and model; shared by several threads.

    ``url`` is the API's base URL (``https://api.openai.com/v1``,
    ``http://localhost:11434/v1``); ``pool_size`` is how many keep-alive
    connections to it are kept open, as many as threads calling at once.
    """

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        pool_size: int = 4,
    ):
        self.endpoint = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout = timeout
        self._api_key = api_key or None
        self._session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool_size, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._session.headers["Content-Type"] = "application/json"
        if self._api_key:
            self._session.headers["Authorization"] = f"Bearer {self._api_key}"
        self._lock = threading.Lock()
        self._json_object_only = False

    @property
    def json_object_only(self) -> bool:
        """Whether this endpoint refused ``json_schema`` and is sent ``json_object``."""
        with self._lock:
            return self._json_object_only

    def complete(
        self, messages: list[dict[str, str]], schema: dict, *, name: str = "memsvc_facts"
    ) -> Reply:
        """The model's answer to ``messages``, asked for as JSON in ``schema``; one attempt.

        Raises :class:`ModelError` when there is no usable answer.
        """
        body: dict[str, t.Any] = {"model": self.model, "messages": messages, "temperature": 0}
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        if not self.json_object_only:
            structured = {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
            status, data, headers = self._post({**body, "response_format": structured})
            if not _refuses_schema(status, data):
                return _reply(status, data, headers, prompt_chars, self._api_key)
            log.info(
                "model endpoint refused a json_schema answer (%s); asking for json_object",
                _failure_reason(status, data, self._api_key),
            )
        status, data, headers = self._post({**body, "response_format": {"type": "json_object"}})
        reply = _reply(status, data, headers, prompt_chars, self._api_key)
        with self._lock:
            if not self._json_object_only:
                log.warning(
                    "the endpoint of model %s takes json_object only: asking for that from now on",
                    self.model,
                )
            self._json_object_only = True
        return reply

    def close(self) -> None:
        self._session.close()

    def _post(self, body: dict[str, t.Any]) -> tuple[int, bytes, t.Mapping[str, str]]:
        """The status, body and headers of one POST, or a :class:`ModelError`."""
        started = time.monotonic()
        try:
            resp = self._session.post(
                self.endpoint,
                json=body,
                # Credentials are the key's alone: no ~/.netrc entry for the host replaces
                # (or, without a key, adds) an Authorization header.
                auth=_headers_as_set,
                timeout=(min(CONNECT_TIMEOUT, self.timeout), self.timeout),
                allow_redirects=False,
                stream=True,
            )
        except requests.Timeout:
            raise ModelError(f"no answer within {self.timeout:g}s", retryable=True) from None
        except _CONFIG_ERRORS as e:
            raise ModelError(f"bad endpoint URL ({type(e).__name__})", retryable=False) from None
        except requests.RequestException as e:
            raise ModelError(f"connection failed ({_cause(e)})", retryable=True) from None
        try:
            data = self._read(resp, started)
        finally:
            resp.close()
        return resp.status_code, data, resp.headers

    def _read(self, resp: requests.Response, started: float) -> bytes:
        """The whole body, within the timeout overall and :data:`MAX_ANSWER_BYTES`."""
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in resp.iter_content(64 * 1024):
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise ModelError(
                        f"HTTP {resp.status_code}: the answer is larger than "
                        f"{MAX_ANSWER_BYTES // (1024 * 1024)} MiB",
                        retryable=True,
                        status=resp.status_code,
                    )
                if time.monotonic() - started > self.timeout:
                    raise ModelError(f"no whole answer within {self.timeout:g}s", retryable=True)
                chunks.append(chunk)
        except requests.Timeout:
            raise ModelError(f"no answer within {self.timeout:g}s", retryable=True) from None
        except requests.RequestException as e:
            raise ModelError(f"the answer was cut off ({_cause(e)})", retryable=True) from None
        return b"".join(chunks)


def _reply(
    status: int, data: bytes, headers: t.Mapping[str, str], prompt_chars: int, key: str | None
) -> Reply:
    """The reply in a 2xx answer; a :class:`ModelError` for anything else."""
    if not 200 <= status < 300:
        retryable = status in _RETRY_STATUSES or status >= 500
        retry_after = None
        if status in _RETRY_AFTER_STATUSES:
            retry_after = _retry_after(headers.get("Retry-After"))
        raise ModelError(
            _failure_reason(status, data, key),
            retryable=retryable,
            status=status,
            retry_after=retry_after,
        )
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    usage = _usage(body)
    try:
        message = body["choices"][0]["message"]
        content = message["content"]
    except (TypeError, KeyError, IndexError):
        raise ModelError(
            f"HTTP {status}: the answer is not a chat completion: {_snippet(data, key)}",
            retryable=True,
            status=status,
            usage=usage,
        ) from None
    if not isinstance(content, str) or not content:
        refusal = message.get("refusal") if isinstance(message, dict) else None
        why = f"the model refused: {_clean(str(refusal), key)}" if refusal else "no content"
        raise ModelError(f"HTTP {status}: {why}", retryable=True, status=status, usage=usage)
    if usage is None:
        usage = Usage(_tokens(prompt_chars), _tokens(len(content)), estimated=True)
    return Reply(content, usage)


def _headers_as_set(request: requests.PreparedRequest) -> requests.PreparedRequest:
    """An auth that leaves the request as the session set it (and so keeps .netrc out)."""
    return request


def _refuses_schema(status: int, data: bytes) -> bool:
    """Whether an answer to a json_schema request refuses it: any 400, or a 5xx naming it
    (llama.cpp builds before json_schema support answered 500 "response_format type must
    be one of text or json_object")."""
    if status == 400:
        return True
    return status >= 500 and b"json_schema" in data[:4096]


def _usage(body: t.Any) -> Usage | None:
    """The usage the endpoint reported, if it reported whole counts."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (prompt, completion)):
        return None
    return Usage(t.cast(int, prompt), t.cast(int, completion), estimated=False)


def _tokens(chars: int) -> int:
    """A token estimate for text of ``chars`` characters: about four a token in English."""
    return math.ceil(chars / 4)


def _failure_reason(status: int, data: bytes, key: str | None) -> str:
    return f"HTTP {status}: {_error_message(data, key)}"


def _error_message(data: bytes, key: str | None) -> str:
    """What an error answer says, in any of the shapes endpoints use.

    OpenAI, Ollama's /v1, the llama.cpp server, LiteLLM and vLLM since 0.10:
    ``{"error": {"message": ...}}``; Ollama's native API: ``{"error": "..."}``;
    vLLM before: ``{"object": "error", "message": ...}``; proxies: HTML pages
    (their title) or nothing.
    """
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    message: t.Any = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        if not isinstance(message, str):
            message = body.get("message", body.get("detail"))
    if isinstance(message, str) and message.strip():
        return _clean(message, key)
    return _snippet(data, key)


def _snippet(data: bytes, key: str | None) -> str:
    """A body that is not the expected JSON, described briefly: an HTML page by its title."""
    text = data.decode("utf-8", "replace")
    title = _TITLE.search(text)
    if title:
        text = title.group(1)
    elif text.lstrip().startswith("<"):
        text = _TAG.sub(" ", text)
    return _clean(text, key) or "empty body"


def _clean(text: str, key: str | None) -> str:
    """``text`` on one line, with secrets redacted, then cut to :data:`REASON_CHARS`.

    Redacted before it is cut, so that no part of a key survives a cut through it.
    """
    text = " ".join(text.split())
    if key:
        text = text.replace(key, "[redacted]")
    text = _SECRET_SHAPES.sub("[redacted]", text)
    if len(text) > REASON_CHARS:
        text = text[: REASON_CHARS - 3] + "..."
    return text


def _cause(error: BaseException) -> str:
    """The innermost cause's class name: what went wrong, without hosts or data.

    requests and urllib3 wrap the socket's error in arguments (``args``) and
    ``reason``s rather than ``__cause__``: all are followed.
    """
    seen = {id(error)}
    while True:
        inner = [error.__cause__, getattr(error, "reason", None), *error.args]
        found = [e for e in inner if isinstance(e, BaseException) and id(e) not in seen]
        if not found:
            return type(error).__name__
        error = found[0]
        seen.add(id(error))


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), at most an hour."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds):
        return None
    return min(RETRY_AFTER_MAX, max(0.0, seconds))
