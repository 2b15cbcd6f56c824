"""No answer of the API may be kept by a cache in front of memsvc: a cache keyed on the URL
would hand one tenant's GET answers to another."""

from __future__ import annotations

import pytest

from tests.support.helpers import mutate
from tests.support.helpers import query


def check_uncacheable(resp) -> None:
    assert resp.headers.get("Cache-Control") == "no-store", (resp.status_code, resp.headers)
    varies = {v.strip().lower() for v in resp.headers.get("Vary", "").split(",")}
    assert {"x-api-key", "authorization"} <= varies, resp.headers


@pytest.mark.parametrize(
    "send",
    [
        lambda client, auth: query(client, "memory.getAll", {"userId": "u"}, headers=auth),
        lambda client, auth: query(client, "service.info", headers=auth),
        lambda client, auth: query(client, "memory.getAll", {"userId": "u"}),  # 401
        lambda client, auth: query(client, "memory.nope", {"userId": "u"}, headers=auth),  # 404
        lambda client, auth: query(client, "memory.getAll", {"user": 1}, headers=auth),  # 400
        lambda client, auth: client.get(
            "/trpc/memory.getAll,service.info",
            query_string={"batch": "1", "input": '{"0":{"userId":"u"}}'},
            headers=auth,
        ),
        lambda client, auth: client.get("/trpc/memory.getAll?batch=1&input=[", headers=auth),
        lambda client, auth: mutate(client, "memory.add", {"userId": "u"}, headers=auth),
        lambda client, auth: client.head("/trpc/memory.getAll", headers=auth),
        lambda client, auth: client.open("/trpc/memory.getAll", headers=auth, method="PUT"),
    ],
)
def test_every_api_answer_says_no_store(client, auth, send):
    check_uncacheable(send(client, auth))
