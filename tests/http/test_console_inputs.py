"""Hostile input to the console's forms and URLs: a clear error on the page, never a 500."""

import base64
import hashlib
import hmac
import html
import json
import time

import pytest

from memsvc.api.context import runtime
from tests.http.test_console_http import csrf_of
from tests.http.test_console_http import sign_in

SECRET = "s" * 40
#: Deeper than Python's parser recurses.
DEEP = 100_000


@pytest.fixture
def signed_in(client, key):
    """A client signed in with a key, and the key."""
    assert sign_in(client, key).status_code == 302
    return client, key


@pytest.mark.parametrize(
    "field, value",
    [("threshold", "nan"), ("threshold", "-inf"), ("limit", "nan"), ("limit", "inf"),
     ("limit", "ten")],
)  # fmt: skip
def test_a_search_number_that_is_no_number_is_a_clear_error(signed_in, field, value):
    client, _ = signed_in
    page = client.get("/console/search", query_string={"user": "u", "q": "x", field: value})
    assert page.status_code == 400, page.text[:300]
    assert f"{field} must be a number" in page.text


@pytest.mark.parametrize(
    "args, said",
    [({"context": "nan"}, "context must be a number"),
     ({"context": "1e999"}, "context must be a number"),
     ({"kinds": "everything"}, "kinds[0]: must be one of memory, message, fact"),
     ({"kinds": ["memory", "memory", "fact", "message"]}, "kinds: must hold at most 3 kinds"),
     ({"occurredAfter": "yesterday"}, "occurredAfter"),
     ({"occurredBefore": "2023-02-30T10:00:00"}, "occurredBefore"),
     ({"occurredAfter": "9" * 5000}, "occurredAfter"),
     ({"now": "tomorrow"}, "now"),
     ({"now": "2023-13-01T10:00:00"}, "now")],
)  # fmt: skip
def test_a_search_scope_the_api_refuses_is_a_clear_error(signed_in, args, said):
    client, _ = signed_in
    page = client.get("/console/search", query_string={"user": "u", "q": "x", **args})
    assert page.status_code == 400, page.text[:300]
    assert said in html.unescape(page.text)


@pytest.mark.parametrize(
    "args, said",
    [({"after": "abc"}, "after must be a message position"),
     ({"after": "-1"}, "after must be a message position"),
     ({"after": "9" * 5000}, "after must be a message position"),
     ({"at": "1.5"}, "at must be a message position"),
     ({"at": "\u0663"}, "at must be a message position"),
     ({"id": "s" * 5000}, "sessionId"),
     ({"id": ""}, "sessionId"),
     ({"user": ""}, "userId")],
)  # fmt: skip
def test_a_session_page_of_hostile_arguments_is_a_clear_error(signed_in, args, said):
    client, _ = signed_in
    page = client.get("/console/session", query_string={"user": "u", "id": "s", **args})
    assert page.status_code == 400, page.text[:300]
    assert said in html.unescape(page.text)


def test_a_sessions_cursor_that_is_no_session_is_a_clear_error(signed_in):
    client, _ = signed_in
    for cursor in ("no-such-session", "x" * 5000):
        page = client.get("/console/user", query_string={"id": "u", "sessions": cursor})
        assert page.status_code == 400, page.text[:300]
        assert "cursor" in page.text


def test_a_filter_nested_past_any_parser_is_a_clear_error(signed_in):
    client, _ = signed_in
    page = client.get("/console/user", query_string={"id": "u", "filter": "[" * DEEP})
    assert page.status_code == 400, page.text[:300]
    assert "filter: Malformed JSON: nested too deeply" in page.text


@pytest.mark.parametrize(
    "metadata, said",
    [("[" * DEEP, "nested too deeply"), ('{"a": NaN}', "NaN"), ('{"a": Infinity}', "Infinity"),
     ('{"a": -Infinity}', "Infinity")],
)  # fmt: skip
def test_metadata_that_is_no_json_is_a_clear_error(signed_in, metadata, said):
    client, key = signed_in
    added = client.post(
        "/trpc/memory.add", json={"userId": "u", "content": "a note"}, headers={"x-api-key": key}
    ).json["result"]["data"]
    form = client.get("/console/memory", query_string={"id": added["id"]})
    saved = client.post(
        "/console/memory/update",
        data={"csrf": csrf_of(form), "id": added["id"], "content": "a note", "metadata": metadata},
    )
    assert saved.status_code == 400, saved.text[:300]
    assert "metadata: Malformed JSON" in saved.text and said in saved.text
    again = client.get(f"/trpc/memory.getById?input={json.dumps({'id': added['id']})}",
                       headers={"x-api-key": key})  # fmt: skip
    assert again.json["result"]["data"]["metadata"] == {}


def _keys_session(make_app):
    app = make_app(JWT_SECRET=SECRET)
    client = app.test_client()
    with app.app_context():
        token = runtime().tokens.mint("tenant-A")
    assert sign_in(client, token, what="token").status_code == 302
    return client, token


def test_a_limit_of_thousands_of_digits_is_a_clear_error(make_app):
    client, token = _keys_session(make_app)
    created = client.post(
        "/trpc/keys.create", json={"name": "k"}, headers={"Authorization": f"Bearer {token}"}
    ).json["result"]["data"]
    page = client.get("/console/keys")
    answer = client.post(
        "/console/keys/limits",
        data={"csrf": csrf_of(page), "id": created["id"], "rateLimit": "9" * 5000},
    )
    assert answer.status_code == 400, answer.text[:300]
    assert "rateLimit" in answer.text


def _signed(claims_json: str) -> str:
    """An HS256 JWT with exactly this payload text, correctly signed with SECRET."""

    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = part(claims_json.encode())
    mac = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(mac)}"


def test_a_signed_token_nested_past_any_parser_is_refused_not_a_500(make_app):
    client = make_app(JWT_SECRET=SECRET).test_client()
    exp = int(time.time()) + 600
    # Deep enough for the parser to give up, short enough for a header (5 KiB).
    depth = 2000
    token = _signed(f'{{"sub": "tenant-A", "exp": {exp}, "x": {"[" * depth}{"]" * depth}}}')
    api = client.get("/trpc/keys.list", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 401, api.text[:300]
    assert api.json["error"]["message"] == "Malformed or unverifiable token"
    page = sign_in(client, token, what="token")
    assert page.status_code == 401 and "That token was refused" in page.text
