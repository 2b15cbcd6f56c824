"""Embeddings from any OpenAI-compatible ``POST {url}/embeddings`` endpoint.

Works with OpenAI, Azure OpenAI's compatible endpoint, Ollama, vLLM, TEI,
LiteLLM and the like. Failures that may pass (timeouts, refused
connections, 429 and 5xx answers) are retried a bounded number of times
with exponential backoff, within an overall deadline.

A slow or failing provider must not take the whole service down with it:

* at most ``max_concurrency`` calls per worker process wait on the provider
  at once (fewer than its threads). A call beyond that waits for a slot
  while the provider keeps answering (a healthy one frees slots within
  moments, however busy), but is refused with 503 as soon as a call under
  way has waited half the timeout: a slow provider then holds only
  those slots, and reads, health checks and key management always find a
  free thread;
* after ``BREAKER_FAILURES`` calls in a row fail, calls fail at once for
  ``BREAKER_SECONDS``, then one call probes whether the provider is back.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
import typing as t

import numpy as np
import requests

from ..errors import BadRequest
from .base import Embedder
from .base import InputTooLong
from .base import ProviderBusy
from .base import ProviderError
from .base import unit_rows
from .windows import char_windows

log = logging.getLogger(__name__)

_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_BACKOFF_BASE = 0.5  # seconds before the first retry, doubled after each
_BACKOFF_MAX = 8.0
# A provider asking us to come back later than this is treated as down:
# waiting would hold the caller's request for longer than it is worth.
_RETRY_AFTER_MAX = 10.0
# How providers say a text is longer than the model takes (OpenAI: "maximum
# context length", "too many tokens"); "token" alone also names credentials.
_LENGTH_WORDS = (
    "too long",
    "maximum context",
    "context length",
    "maximum input",
    "too many tokens",
    "token limit",
    "tokens exceed",
)
# Credentials a provider might echo back in its error text: bearer tokens,
# key-shaped strings (sk-..., long runs of key characters).
_SECRET_SHAPES = re.compile(
    r"(?i)\bbearer\s+\S+|\b(?:sk|pk|rk|key|api[_-]?key)[-_][A-Za-z0-9_\-]{8,}|[A-Za-z0-9_\-+/=]{32,}"
)


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class OpenAIEmbedder(Embedder):
    """An :class:`~memsvc.embeddings.Embedder` over the OpenAI embeddings API."""

    def __init__(
        self,
        *,
        url: str,
        api_key: str | None,
        model: str,
        dimensions: int,
        send_dimensions: bool | None = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        max_concurrency: int = 3,
        window_chars: int = 400,
    ):
        self.endpoint = url.rstrip("/") + "/embeddings"
        self.model = model
        self.model_id = f"openai:{model}"
        self.dimensions = dimensions
        # Only text-embedding-3 models are known to take a `dimensions`
        # parameter; some compatible servers reject it for other models.
        if send_dimensions is None:
            send_dimensions = model.startswith("text-embedding-3")
        self.send_dimensions = send_dimensions
        self.window_chars = window_chars
        self.timeout = timeout
        self.max_retries = max_retries
        # Total time one embed() may take, retries and waits included.
        self.deadline = timeout * (max_retries + 1) + _BACKOFF_MAX
        # A call under way longer than this means the provider is slow now
        # (not merely this box busy): calls beyond the slots stop waiting.
        self.slow_call = timeout / 2
        self._headers = {"Content-Type": "application/json"}
        self._api_key = api_key
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._local = threading.local()
        self.sleep: t.Callable[[float], None] = time.sleep
        self.clock: t.Callable[[], float] = time.monotonic
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self.max_concurrency = max_concurrency
        self._started: dict[int, float] = {}  # calls under way: id -> start time
        self._started_lock = threading.Lock()
        self._breaker_lock = threading.Lock()
        self._failures = 0  # calls failed in a row
        self._open_until = 0.0
        self._probing = False

    BREAKER_FAILURES = 3
    BREAKER_SECONDS = 10.0

    def _session(self) -> requests.Session:
        # One keep-alive session per thread: connections are reused across
        # requests, and no Session is shared between threads.
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def warm_up(self) -> None:
        pass  # nothing to load; connections open on first use

    def windows(self, text: str) -> list[str]:
        """What to embed for ``text``: itself if short, else windows of its sentences.

        By characters (``window_chars``), since the provider's tokens are not
        known here; the whole text too while it is within four windows' length.
        """
        parts = char_windows(text, self.window_chars)
        if len(parts) > 1 and len(text) <= 4 * self.window_chars:
            return [text, *parts]
        return parts

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        probe = self._admit()
        if not self._acquire_slot():
            self._settle(probe, ok=None)
            raise ProviderBusy(
                f"embedding provider busy: {self.max_concurrency} calls from this worker are "
                "already waiting on it; try again shortly"
            )
        call = object()
        with self._started_lock:
            self._started[id(call)] = self.clock()
        try:
            vectors = self._embed(texts)
        except ProviderError:
            self._settle(probe, ok=False)
            raise
        except BaseException:
            self._settle(probe, ok=None)
            raise
        finally:
            with self._started_lock:
                del self._started[id(call)]
            self._slots.release()
        self._settle(probe, ok=True)
        return vectors

    def _acquire_slot(self) -> bool:
        """A slot to call the provider, unless it is slow now or stays full too long."""
        give_up = self.clock() + self.deadline
        while not self._slots.acquire(timeout=0.05):
            with self._started_lock:
                oldest = min(self._started.values(), default=None)
            now = self.clock()
            if (oldest is not None and now - oldest > self.slow_call) or now > give_up:
                return False
        return True

    def _admit(self) -> bool:
        """Pass the circuit breaker, or raise; True if this call is the probe."""
        with self._breaker_lock:
            if self._failures < self.BREAKER_FAILURES:
                return False
            wait = self._open_until - self.clock()
            if wait > 0 or self._probing:
                raise ProviderError(
                    f"embedding provider failed: {self._failures} calls in a row failed; "
                    f"not calling it for {max(wait, 0):.0f}s more"
                )
            self._probing = True
            return True

    def _settle(self, probe: bool, ok: bool | None) -> None:
        """Record a call's outcome (None: it says nothing about the provider)."""
        with self._breaker_lock:
            if probe:
                self._probing = False
            if ok is True:
                self._failures = 0
            elif ok is False:
                self._failures += 1
                if self._failures >= self.BREAKER_FAILURES:
                    self._open_until = self.clock() + self.BREAKER_SECONDS
                    log.warning(
                        "embedding provider: %d calls in a row failed; pausing calls for %gs",
                        self._failures,
                        self.BREAKER_SECONDS,
                    )

    def _embed(self, texts: t.Sequence[str]) -> np.ndarray:
        payload: dict[str, t.Any] = {"model": self.model, "input": list(texts)}
        if self.send_dimensions:
            payload["dimensions"] = self.dimensions
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                body = self._post(payload, started)
            except _Retry as retry:
                attempt += 1
                wait = _backoff(attempt) if retry.retry_after is None else retry.retry_after
                elapsed = time.monotonic() - started
                if attempt > self.max_retries or elapsed + wait > self.deadline:
                    log.warning(
                        "embedding provider failed after %d attempt(s): %s", attempt, retry.reason
                    )
                    raise ProviderError(
                        f"embedding provider failed: {retry.reason} "
                        f"(after {attempt} attempt{'s' if attempt > 1 else ''})"
                    ) from None
                log.info("embedding provider: %s; retrying in %.1fs", retry.reason, wait)
                self.sleep(wait)
                continue
            return self._vectors(body, len(texts))

    def _post(self, payload: dict[str, t.Any], started: float) -> t.Any:
        remaining = self.deadline - (time.monotonic() - started)
        read_timeout = max(0.1, min(self.timeout, remaining))
        try:
            resp = self._session().post(
                self.endpoint,
                json=payload,
                headers=self._headers,
                timeout=(min(5.0, read_timeout), read_timeout),
            )
        except requests.Timeout:
            raise _Retry(f"no answer within {read_timeout:g}s") from None
        except requests.ConnectionError:
            raise _Retry("could not connect") from None
        except requests.RequestException as e:
            raise ProviderError(f"embedding provider failed: {type(e).__name__}") from None
        if resp.status_code in _RETRY_STATUSES or resp.status_code >= 500:
            retry_after = _retry_after(resp.headers.get("Retry-After"))
            if retry_after is not None and retry_after > _RETRY_AFTER_MAX:
                raise ProviderError(
                    f"embedding provider failed: HTTP {resp.status_code}, "
                    f"busy for {retry_after:g}s more"
                )
            raise _Retry(f"HTTP {resp.status_code}", retry_after)
        if resp.status_code == 400:
            message = self._redacted(_error_message(resp))
            log.info("embedding provider refused a text: %s", message)
            if any(word in message.lower() for word in _LENGTH_WORDS):
                raise InputTooLong(f"text is too long for the embedding model: {message}")
            raise BadRequest(f"the embedding provider rejected the text: {message}")
        if resp.status_code != 200:
            log.warning("embedding provider answered HTTP %d", resp.status_code)
            raise ProviderError(f"embedding provider failed: HTTP {resp.status_code}")
        try:
            return resp.json()
        except ValueError:
            raise ProviderError("embedding provider failed: the answer is not JSON") from None

    def _redacted(self, message: str) -> str:
        """A provider's error text, safe to show the caller and to log."""
        return redact(message, self._api_key)

    def _vectors(self, body: t.Any, count: int) -> np.ndarray:
        try:
            items = sorted(body["data"], key=lambda item: item["index"])
            vectors = [item["embedding"] for item in items]
        except (TypeError, KeyError):
            raise ProviderError(
                "embedding provider failed: the answer has no data[].embedding"
            ) from None
        return unit_rows(vectors, count, self.dimensions)


def _backoff(attempt: int) -> float:
    delay = min(_BACKOFF_MAX, _BACKOFF_BASE * 2 ** (attempt - 1))
    return delay / 2 + random.uniform(0, delay / 2)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def redact(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` and anything shaped like a credential replaced."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _SECRET_SHAPES.sub("[redacted]", text)


def _error_message(resp: requests.Response) -> str:
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text
    message = " ".join(str(message).split())
    return message[:300] or "no reason given"
