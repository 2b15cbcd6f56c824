"""What the sync and async clients share: the calls' inputs, answers, errors and retry rules."""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import json
import logging
import os
import random
import time
import typing as t
import urllib.parse

from ._version import __version__
from .errors import ConnectionFailed
from .errors import MemsvcError
from .errors import RateLimited
from .errors import ServerError
from .errors import error_class
from .models import EndUser
from .models import Ingested
from .models import Job
from .models import JobStatus
from .models import Memory
from .models import Session
from .models import Unset
from .models import format_moment
from .models import format_time

logger = logging.getLogger("memsvc_client")

Json = dict[str, t.Any]
Mode = t.Literal["semantic", "keyword", "hybrid"]
MODES: tuple[Mode, ...] = t.get_args(Mode)
Kind = t.Literal["memory", "message", "fact"]


class Message(t.TypedDict, total=False):
    """A message for ``ingest``, as chat APIs write them (``role`` and ``content`` required)."""

    role: t.Required[t.Literal["user", "assistant", "system", "tool"]]
    content: t.Required[str]
    #: Who said it.
    name: str
    #: When it was said: an aware datetime, or ISO 8601 text with its zone.
    at: datetime.datetime | str
    #: Your id of the message: storing it again is then harmless.
    id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """Which memories a search or a listing takes, by kind and time (all fields optional)."""

    kinds: t.Collection[Kind] | None = None
    occurred_after: datetime.datetime | None = None
    occurred_before: datetime.datetime | None = None
    as_of: datetime.datetime | None = None
    include_superseded: bool = False

    def into(self, input: Json) -> Json:
        if self.kinds is not None:
            input["kinds"] = list(self.kinds)
        for name, value in (
            ("occurredAfter", self.occurred_after),
            ("occurredBefore", self.occurred_before),
            ("asOf", self.as_of),
        ):
            if value is not None:
                input[name] = format_time(value)
        if self.include_superseded:
            input["includeSuperseded"] = True
        return input


#: The mode of a search whose caller names none (the client's ``default_mode``
#: unless set otherwise). Hybrid ranks by meaning and raises memories holding
#: the query's words, so a name or a code is found first too.
DEFAULT_MODE: Mode = "hybrid"

#: The code memsvc would send for a status, for answers that are not its
#: envelopes (a proxy's HTML error page, say).
_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_SUPPORTED",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "TOO_MANY_REQUESTS",
    500: "INTERNAL_SERVER_ERROR",
    503: "SERVICE_UNAVAILABLE",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One procedure call: a query (GET) or a mutation (POST)."""

    procedure: str
    input: Json
    mutation: bool = False
    #: Whether sending it twice is harmless, so it may be sent again after a
    #: failure that left unknown whether it reached the server. Queries are;
    #: writes are not, except an add with ``dedupe``.
    resend_safe: bool = True

    def body(self) -> bytes:
        """The input as compact JSON (the POST body, or the ``input`` parameter)."""
        return json.dumps(self.input, separators=(",", ":"), ensure_ascii=False).encode()


def mutation(procedure: str, input: Json, *, resend_safe: bool = False) -> Call:
    """A write, by default never sent again once it may have reached the server."""
    return Call(procedure, input, mutation=True, resend_safe=resend_safe)


USER_AGENT = f"memsvc-client-python/{__version__}"


def base_url(url: str) -> str:
    """The tRPC base URL from the server's root URL (a URL already ending in /trpc is kept)."""
    url = url.rstrip("/")
    return url if url.endswith("/trpc") else url + "/trpc"


def api_key_from(api_key: str | None) -> str:
    """The key given, else ``MEMSVC_API_KEY``; an error naming neither value if none."""
    key = api_key if api_key is not None else os.environ.get("MEMSVC_API_KEY")
    if not key:
        raise ValueError("no API key: pass api_key= or set MEMSVC_API_KEY")
    return key


def check_url(url: str) -> str:
    """The tRPC base URL of a server root URL; refuses what is not http(s)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"memsvc URL must be http:// or https://, not {url!r}")
    return base_url(url)


def recommended(info: t.Mapping[str, t.Any]) -> float | None:
    """The deployment's recommended threshold from service.info, if it states one."""
    value = (info.get("embedder") or {}).get("recommendedThreshold")
    return float(value) if isinstance(value, (int, float)) else None


# -- answers -----------------------------------------------------------------------


def result(call: Call, status: int, headers: t.Mapping[str, str], content: bytes) -> t.Any:
    """The ``data`` of a success envelope, or the typed error the answer stands for."""
    if status == 200:
        try:
            return json.loads(content)["result"]["data"]
        except (ValueError, KeyError, TypeError):
            raise ServerError(
                "the answer is not a tRPC result envelope",
                code="INTERNAL_SERVER_ERROR",
                http_status=status,
                path=call.procedure,
            ) from None
    raise error(call, status, headers, content)


def error(call: Call, status: int, headers: t.Mapping[str, str], content: bytes) -> MemsvcError:
    """The typed error of a failed call's answer."""
    code = _CODES.get(status, f"HTTP_{status}")
    message = content[:300].decode("utf-8", "replace").strip() or f"HTTP {status}"
    path: str | None = call.procedure
    http_status = status
    try:
        envelope = json.loads(content)["error"]
        data = envelope.get("data") or {}
        message = str(envelope.get("message", message))
        found = data.get("code", envelope.get("code"))
        if isinstance(found, str):
            code = found
        if isinstance(data.get("httpStatus"), int):
            http_status = data["httpStatus"]
        path = data.get("path") or path
    except (ValueError, KeyError, TypeError, AttributeError):
        pass  # not memsvc's envelope: keep what the status says
    cls = error_class(code, http_status)
    retry_after = parse_retry_after(headers.get("retry-after"))
    if cls is RateLimited and retry_after is None:
        retry_after = 1.0  # a 429 without Retry-After: memsvc always sends one
    return cls(message, code=code, http_status=http_status, path=path, retry_after=retry_after)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number of seconds or an HTTP date)."""
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
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def as_error_of(err: MemsvcError, procedure: str) -> MemsvcError:
    """``err``, from a call the client made on its own for the caller's ``procedure``, as hers.

    A search without a threshold first asks service.info for the recommended
    one: a wrong key is then a 401 on ``memory.search``, the call made, and
    not on a procedure the caller never called.
    """
    if isinstance(err, ConnectionFailed):
        # Whatever became of the client's own call, the caller's was not sent.
        return ConnectionFailed(err.message, path=procedure, request_sent=False)
    return type(err)(
        err.message,
        code=err.code,
        http_status=err.http_status,
        path=procedure,
        retry_after=err.retry_after,
    )


def connection_failed(call: Call, exc: Exception, *, request_sent: bool) -> ConnectionFailed:
    """The typed error for a call that got no answer."""
    detail = str(exc) or type(exc).__name__
    return ConnectionFailed(
        f"no answer from memsvc: {detail}", path=call.procedure, request_sent=request_sent
    )


# -- retries -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failed call is sent again, and after how long."""

    max_retries: int = 3
    #: A 429 or 503 asking to wait longer than this is raised at once.
    max_retry_wait: float = 60.0

    def delay(self, call: Call, attempt: int, err: MemsvcError) -> float | None:
        """Seconds to wait before sending ``call`` again after ``err``, or None to raise it."""
        if attempt >= self.max_retries:
            return None
        if isinstance(err, RateLimited) or err.code == "SERVICE_UNAVAILABLE":
            # Refused before anything was done (memsvc stores nothing on a 429
            # or a 503), so any call, a write too, can be sent again.
            wait = err.retry_after if err.retry_after is not None else backoff(attempt)
            return wait if wait <= self.max_retry_wait else None
        if isinstance(err, ConnectionFailed):
            if err.request_sent and not call.resend_safe:
                # The write may have been applied: sending it again could
                # store it twice. The caller decides (dedupe makes it safe).
                return None
            return backoff(attempt)
        return None

    def log(self, call: Call, attempt: int, err: MemsvcError, wait: float) -> None:
        """Warn that a call waits before it is sent again: for how long, and why.

        A warning, so that it shows without any logging set up: a call that
        takes a minute because the key is at its rate limit must not look
        like a hung server. Never with the call's headers: they hold the key.
        """
        logger.warning(
            "%s failed (%s): %s; waiting %.2fs (%s) before retry %d of %d",
            call.procedure,
            err.code,
            err.message,
            wait,
            "the server's Retry-After" if err.retry_after is not None else "backoff",
            attempt + 1,
            self.max_retries,
        )


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter, so many clients do not retry in step."""
    return min(8.0, 0.25 * 2.0**attempt) * random.uniform(0.5, 1.0)


# -- inputs --------------------------------------------------------------------------


def _times(
    input: Json, created_after: datetime.datetime | None, created_before: datetime.datetime | None
) -> Json:
    if created_after is not None:
        input["createdAfter"] = format_time(created_after)
    if created_before is not None:
        input["createdBefore"] = format_time(created_before)
    return input


def add_call(
    user_id: str,
    content: str,
    metadata: t.Mapping[str, t.Any] | None,
    expires_at: datetime.datetime | None,
    dedupe: bool,
    occurred_at: datetime.datetime | None = None,
) -> Call:
    """memory.add; with ``dedupe`` sending it twice stores it once, so it may be re-sent."""
    input: Json = {"userId": user_id, "content": content}
    if metadata is not None:
        input["metadata"] = dict(metadata)
    if expires_at is not None:
        input["expiresAt"] = format_time(expires_at)
    if dedupe:
        input["dedupe"] = True
    if occurred_at is not None:
        input["occurredAt"] = format_moment(occurred_at)
    return mutation("memory.add", input, resend_safe=dedupe)


def ingest_call(
    user_id: str,
    messages: t.Sequence[Message | t.Mapping[str, t.Any]],
    session_id: str | None,
    metadata: t.Mapping[str, t.Any] | None,
    extract: bool | None,
) -> Call:
    """memory.ingest; sending it again is harmless when every message has an ``id``."""
    sent = []
    for message in messages:
        item = dict(message)
        at = item.get("at")
        if isinstance(at, datetime.datetime):
            item["at"] = format_moment(at)
        sent.append(item)
    input: Json = {"userId": user_id, "messages": sent}
    if session_id is not None:
        input["sessionId"] = session_id
    if metadata is not None:
        input["metadata"] = dict(metadata)
    if extract is not None:
        input["extract"] = extract
    every_id = bool(sent) and all(m.get("id") is not None for m in sent)
    return mutation("memory.ingest", input, resend_safe=every_id)


def sessions_call(user_id: str, limit: int | None, cursor: str | None) -> Call:
    """memory.sessions, one page."""
    input: Json = {"userId": user_id}
    if limit is not None:
        input["limit"] = limit
    if cursor is not None:
        input["cursor"] = cursor
    return Call("memory.sessions", input)


def session_call(user_id: str, session_id: str, limit: int | None, after: int | None) -> Call:
    """memory.session, one page of messages."""
    input: Json = {"userId": user_id, "sessionId": session_id}
    if limit is not None:
        input["limit"] = limit
    if after is not None:
        input["after"] = after
    return Call("memory.session", input)


def job_call(job_id: str) -> Call:
    """memory.job."""
    return Call("memory.job", {"id": job_id})


def jobs_call(
    user_id: str | None, status: JobStatus | None, limit: int | None, cursor: str | None
) -> Call:
    """memory.jobs, one page."""
    input: Json = {}
    if user_id is not None:
        input["userId"] = user_id
    if status is not None:
        input["status"] = status
    if limit is not None:
        input["limit"] = limit
    if cursor is not None:
        input["cursor"] = cursor
    return Call("memory.jobs", input)


def retry_job_call(job_id: str) -> Call:
    """memory.retryJob: a job not failed is answered as it is, so sending it again is harmless."""
    return mutation("memory.retryJob", {"id": job_id}, resend_safe=True)


#: Seconds between two looks at a job in ``wait_for_job``, by default.
JOB_POLL_INTERVAL = 0.5


def check_wait(timeout: float, interval: float) -> None:
    """ValueError for a wait that could not work, before any call."""
    if not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
    if not interval > 0:
        raise ValueError(f"interval must be a number of seconds > 0, not {interval!r}")


def monotonic() -> float:
    """The clock ``wait_for_job`` measures its timeout by."""
    return time.monotonic()


def check_mode(mode: str) -> Mode:
    """``mode`` if it is one of memsvc's search modes, else ValueError (before any call)."""
    if mode not in MODES:
        raise ValueError(f"search mode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def floor_by_default(mode: Mode) -> bool:
    """Whether a search in ``mode`` without a threshold gets the recommended one.

    Semantic and hybrid searches rank by meaning: without a floor every
    memory would come back. A keyword match is its own criterion, so a
    keyword search without a threshold has none.
    """
    return mode != "keyword"


def search_call(
    user_id: str,
    query: str,
    limit: int | None,
    threshold: float | None,
    filter: t.Mapping[str, t.Any] | None,
    mode: Mode,
    explain: bool,
    created_after: datetime.datetime | None,
    created_before: datetime.datetime | None,
    scope: Scope | None = None,
    context: int | None = None,
    time: t.Literal["on", "off"] | None = None,
    now: datetime.datetime | None = None,
) -> Call:
    """memory.search; a None threshold is left out (the server's default for the mode)."""
    input: Json = {"userId": user_id, "query": query, "mode": mode}
    if scope is not None:
        scope.into(input)
    if context:
        input["context"] = context
    if time is not None:
        input["time"] = time
    if now is not None:
        input["now"] = format_moment(now)
    if limit is not None:
        input["limit"] = limit
    if threshold is not None:
        input["threshold"] = threshold
    if filter is not None:
        input["filter"] = dict(filter)
    if explain:
        input["explain"] = True
    return Call("memory.search", _times(input, created_after, created_before))


def get_all_call(
    user_id: str,
    limit: int | None,
    cursor: str | None,
    filter: t.Mapping[str, t.Any] | None,
    created_after: datetime.datetime | None,
    created_before: datetime.datetime | None,
    scope: Scope | None = None,
) -> Call:
    """memory.getAll, one page."""
    input: Json = {"userId": user_id}
    if scope is not None:
        scope.into(input)
    if limit is not None:
        input["limit"] = limit
    if cursor is not None:
        input["cursor"] = cursor
    if filter is not None:
        input["filter"] = dict(filter)
    return Call("memory.getAll", _times(input, created_after, created_before))


def users_call(limit: int | None, cursor: str | None, prefix: str | None) -> Call:
    """memory.users, one page."""
    input: Json = {}
    if limit is not None:
        input["limit"] = limit
    if cursor is not None:
        input["cursor"] = cursor
    if prefix is not None:
        input["prefix"] = prefix
    return Call("memory.users", input)


def by_id(memory_id: str, user_id: str | None) -> Json:
    """The input naming one memory; with ``user_id``, only if it is that end user's."""
    input: Json = {"id": memory_id}
    if user_id is not None:
        input["userId"] = user_id
    return input


def update_call(
    memory_id: str,
    content: str | Unset,
    metadata: t.Mapping[str, t.Any] | None | Unset,
    expires_at: datetime.datetime | None | Unset,
    user_id: str | None = None,
    occurred_at: datetime.datetime | None | Unset = Unset.UNSET,
) -> Call:
    """memory.update with the fields given (None clears metadata, expiry or time)."""
    input: Json = by_id(memory_id, user_id)
    if not isinstance(content, Unset):
        input["content"] = content
    if not isinstance(metadata, Unset):
        input["metadata"] = None if metadata is None else dict(metadata)
    if not isinstance(expires_at, Unset):
        input["expiresAt"] = None if expires_at is None else format_time(expires_at)
    if not isinstance(occurred_at, Unset):
        input["occurredAt"] = None if occurred_at is None else format_moment(occurred_at)
    return mutation("memory.update", input)


def end_users(data: t.Any) -> list[EndUser]:
    """A list of EndUsers from a JSON array of them."""
    return [EndUser.from_wire(u) for u in data]


def memories(data: t.Any) -> list[Memory]:
    """A list of Memories from a JSON array of them."""
    return [Memory.from_wire(m) for m in data]


def sessions(data: t.Any) -> list[Session]:
    """A list of Sessions from a JSON array of them."""
    return [Session.from_wire(s) for s in data]


def ingested(data: t.Any) -> Ingested:
    return Ingested.from_wire(data)


def job(data: t.Any) -> Job:
    return Job.from_wire(data)


def jobs(data: t.Any) -> list[Job]:
    """A list of Jobs from a JSON array of them."""
    return [Job.from_wire(j) for j in data]


INFO = Call("service.info", {})
