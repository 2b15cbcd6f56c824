"""What the client makes of answers no test server gives: other proxies' errors, odd headers."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from memsvc_client import BadRequest
from memsvc_client import Explain
from memsvc_client import Memory
from memsvc_client import MemsvcError
from memsvc_client import RateLimited
from memsvc_client import ServerError
from memsvc_client._core import Call
from memsvc_client._core import RetryPolicy
from memsvc_client._core import error
from memsvc_client._core import parse_retry_after
from memsvc_client._core import result
from memsvc_client.errors import ConnectionFailed
from memsvc_client.models import format_time

CALL = Call("memory.getAll", {"userId": "u"})
WIRE = {
    "id": "3b0f1fd4-5a1e-4e59-8a4c-0d0c6f3b8d2a",
    "content": "c",
    "userId": "u",
    "idpUserId": "acme",
    "metadata": {"a": 1},
    "createdAt": "2026-11-23T11:24:03.154Z",
    "updatedAt": "2026-11-23T13:24:03.154+02:00",
    "expiresAt": "2026-12-01T00:00:00.000Z",
    "similarity": 0.5,
    "matchedBy": ["keyword"],
    "explain": {"cosine": 0.5, "keyword": None, "score": 0.5},
}


def test_from_wire_sets_every_field() -> None:
    m = Memory.from_wire(WIRE)
    assert set(vars(m)) == {f.name for f in dataclasses.fields(Memory)}
    assert m.updated_at == datetime.datetime(2026, 11, 23, 11, 24, 3, 154000, tzinfo=datetime.UTC)
    assert m.updated_at.tzinfo is datetime.UTC and m.matched_by == ("keyword",)
    assert m.explain == Explain(cosine=0.5, keyword=None, score=0.5)
    assert m == Memory(**{f.name: getattr(m, f.name) for f in dataclasses.fields(Memory)})
    assert m.to_dict() == {
        **{k: v for k, v in WIRE.items() if k != "idpUserId"},
        "updatedAt": "2026-11-23T11:24:03.154Z",
    }


def test_whole_numbers_on_the_wire_are_floats_in_python() -> None:
    # memsvc writes a similarity of exactly 1 as `1`, as JSON.stringify does.
    m = Memory.from_wire(
        {**WIRE, "similarity": 1, "explain": {"cosine": 1, "keyword": 1, "score": 1}}
    )
    assert m.similarity == 1.0 and type(m.similarity) is float
    assert m.explain is not None
    assert all(type(v) is float for v in (m.explain.cosine, m.explain.keyword, m.explain.score))
    assert Memory.from_wire({**WIRE, "similarity": 0}).similarity == 0.0
    assert type(Memory.from_wire({**WIRE, "similarity": 0}).similarity) is float
    assert Memory.from_wire({k: v for k, v in WIRE.items() if k != "similarity"}).similarity is None


def test_format_time_is_the_wires_and_refuses_naive_datetimes() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert format_time(datetime.datetime(2026, 1, 2, 5, 4, 5, 678999, tzinfo=plus_two)) == (
        "2026-01-02T03:04:05.678Z"
    )
    with pytest.raises(ValueError):
        format_time(datetime.datetime(2026, 1, 2))


def test_answers_that_are_not_memsvcs_envelopes() -> None:
    with pytest.raises(ServerError) as bad_gateway:
        result(CALL, 502, {}, b"<html>Bad Gateway</html>")
    e = bad_gateway.value
    assert (e.code, e.http_status, e.path) == ("HTTP_502", 502, "memory.getAll")
    assert "Bad Gateway" in e.message
    assert isinstance(error(CALL, 413, {}, b"too big"), BadRequest)
    limited = error(CALL, 429, {}, b"")
    assert isinstance(limited, RateLimited) and limited.retry_after == 1.0
    with pytest.raises(ServerError, match="envelope"):
        result(CALL, 200, {}, b"[]")
    assert type(error(CALL, 302, {}, b"")) is MemsvcError


def test_retry_after_as_seconds_or_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


def test_which_failures_are_sent_again() -> None:
    policy = RetryPolicy(max_retries=2, max_retry_wait=30)
    add = Call("memory.add", {}, mutation=True, resend_safe=False)
    lost = ConnectionFailed("x", path="memory.add", request_sent=True)
    refused = ConnectionFailed("x", path="memory.add", request_sent=False)
    assert policy.delay(add, 0, lost) is None
    assert policy.delay(CALL, 0, lost) is not None
    assert policy.delay(add, 0, refused) is not None
    assert policy.delay(add, 2, refused) is None  # retries used up
    wait = RateLimited("x", code="TOO_MANY_REQUESTS", http_status=429, retry_after=12)
    assert policy.delay(add, 0, wait) == 12
    too_long = RateLimited("x", code="TOO_MANY_REQUESTS", http_status=429, retry_after=31)
    assert policy.delay(add, 0, too_long) is None
    busy = ServerError("x", code="SERVICE_UNAVAILABLE", http_status=503, retry_after=1)
    assert policy.delay(add, 1, busy) == 1
    failed = ServerError("x", code="INTERNAL_SERVER_ERROR", http_status=500)
    assert policy.delay(CALL, 0, failed) is None  # the provider failed: not retried
