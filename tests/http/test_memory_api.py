"""Every memory operation through HTTP: shapes, rules, errors, isolation."""

import re

import pytest

from memsvc.api.context import store
from memsvc.services import keys
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
MEMORY_FIELDS = ["id", "content", "userId", "idpUserId", "metadata", "createdAt", "updatedAt"]
MISSING_ID = "00000000-0000-4000-8000-000000000000"


def add(client, auth, content="I like green tea", user="u1", **extra):
    return data(
        mutate(client, "memory.add", {"userId": user, "content": content, **extra}, headers=auth)
    )


# -- add ------------------------------------------------------------------------


def test_add_returns_the_whole_memory(client, auth):
    m = add(client, auth, metadata={"src": "chat", "tags": ["a"], "n": 3})
    assert list(m) == MEMORY_FIELDS
    assert UUID.match(m["id"])
    assert m["content"] == "I like green tea"
    assert m["userId"] == "u1"
    assert m["idpUserId"] == "tenant-A"
    assert m["metadata"] == {"src": "chat", "tags": ["a"], "n": 3}
    assert ISO.match(m["createdAt"]) and m["updatedAt"] == m["createdAt"]


def test_add_without_metadata_returns_an_empty_object(client, auth):
    assert add(client, auth)["metadata"] == {}


def test_added_memory_is_readable_at_once(client, auth):
    m = add(client, auth)
    assert data(query(client, "memory.getById", {"id": m["id"]}, headers=auth)) == m


def test_text_is_kept_exactly(client, auth):
    text = "  Ça coûte 5 € — 東京 🍣\n\ttabs and 'quotes' \"double\" \\ backslash  "
    m = add(client, auth, content=text, user="ü ser/😀")
    again = data(query(client, "memory.getById", {"id": m["id"]}, headers=auth))
    assert again["content"] == text and again["userId"] == "ü ser/😀"


def test_responses_carry_non_ascii_as_utf8(client, auth):
    resp = mutate(client, "memory.add", {"userId": "u", "content": "東京"}, headers=auth)
    assert "東京".encode() in resp.data


BAD_ADD = [
    ({"content": "x"}, "userId: is required"),
    ({"userId": "u"}, "content: is required"),
    ({"userId": "u", "content": ""}, "content: must not be empty"),
    ({"userId": "u", "content": "   \n"}, "content: must not be empty"),
    ({"userId": "", "content": "x"}, "userId: must not be empty"),
    ({"userId": 5, "content": "x"}, "userId: must be a string"),
    ({"userId": "u", "content": ["x"]}, "content: must be a string"),
    ({"userId": "u", "content": None}, "content: must not be null"),
    ({"userId": "u", "content": "a\x00b"}, "content: must not contain NUL"),
    ({"userId": "u", "content": "\ud800"}, "content: must be valid Unicode"),
    ({"userId": "u", "content": "x", "metadata": []}, "metadata: must be a JSON object"),
    ({"userId": "u", "content": "x", "metadata": "s"}, "metadata: must be a JSON object"),
    ({"userId": "u", "content": "x", "metadata": None}, "metadata: must not be null"),
    ({"userId": "u", "content": "x", "metadata": {"k": "\udc00"}}, "metadata: must be valid"),
    ({"userId": "u" * 257, "content": "x"}, "userId: must be at most 256 characters"),
]


@pytest.mark.parametrize("body, message", BAD_ADD)
def test_add_rejects_bad_input(client, auth, body, message):
    error = assert_error(
        mutate(client, "memory.add", body, headers=auth), 400, "BAD_REQUEST", "memory.add"
    )
    assert message in error["message"]
    assert data(query(client, "memory.getAll", {"userId": "u"}, headers=auth)) == []


def test_add_rejects_deeply_nested_metadata(client, auth):
    deep = {}
    node = deep
    for _ in range(40):
        node["a"] = {}
        node = node["a"]
    resp = mutate(
        client, "memory.add", {"userId": "u", "content": "x", "metadata": deep}, headers=auth
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "nested more than 32 levels" in error["message"]


def test_add_rejects_oversized_metadata(configured):
    client, auth = configured(MAX_METADATA_BYTES=100)
    body = {"userId": "u", "content": "x", "metadata": {"k": "v" * 200}}
    resp = mutate(client, "memory.add", body, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "at most 100 bytes" in error["message"]


def test_content_longer_than_the_model_takes_is_stored_whole(client, auth):
    long = "word " * 400  # 400 tokens, more than the model's 256
    added = data(mutate(client, "memory.add", {"userId": "u", "content": long}, headers=auth))
    assert added["content"] == long
    question = {"userId": "u", "query": "word word word", "threshold": 0}
    found = data(query(client, "memory.search", question, headers=auth))
    assert [m["id"] for m in found] == [added["id"]]


def test_content_over_the_character_limit_is_400(configured):
    client, auth = configured(MAX_CONTENT_CHARS=10)
    resp = mutate(client, "memory.add", {"userId": "u", "content": "x" * 11}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "content: must be at most 10 characters" in error["message"]


# -- search ---------------------------------------------------------------------


def search(client, auth, **input):
    return data(query(client, "memory.search", {"userId": "u1", **input}, headers=auth))


def test_search_finds_the_related_memory_first(client, auth):
    allergy = add(client, auth, "User is allergic to peanuts")
    add(client, auth, "User's favourite colour is blue")
    add(client, auth, "User works as a nurse in Lisbon")
    results = search(client, auth, query="Does the user have any food allergies?", threshold=0)
    assert results[0]["id"] == allergy["id"]
    assert list(results[0]) == MEMORY_FIELDS + ["similarity"]
    sims = [r["similarity"] for r in results]
    assert sims == sorted(sims, reverse=True)
    assert all(0 <= s <= 1 for s in sims)


def test_search_of_the_exact_text_scores_one(client, auth):
    m = add(client, auth, "I like green tea")
    [r] = search(client, auth, query="I like green tea")
    assert r["id"] == m["id"]
    assert r["similarity"] == pytest.approx(1, abs=1e-6)


def test_search_default_threshold_is_0_7(client, auth):
    add(client, auth, "The quarterly budget review is on Monday")
    assert search(client, auth, query="I enjoy hiking in the mountains") == []
    assert len(search(client, auth, query="I enjoy hiking in the mountains", threshold=0)) == 1


def test_search_limit_caps_results(client, auth):
    for i in range(12):
        add(client, auth, f"fact number {i} about tea")
    assert len(search(client, auth, query="tea", threshold=0)) == 10
    assert len(search(client, auth, query="tea", threshold=0, limit=3)) == 3
    assert len(search(client, auth, query="tea", threshold=0, limit=100)) == 12


def test_search_with_no_memories_is_an_empty_array(client, auth):
    assert search(client, auth, query="anything", threshold=0) == []


BAD_SEARCH = [
    ({"query": "q", "limit": 0}, "limit: must be between 1 and 100"),
    ({"query": "q", "limit": 101}, "limit: must be between 1 and 100"),
    ({"query": "q", "limit": 2.5}, "limit: must be an integer"),
    ({"query": "q", "limit": "10"}, "limit: must be an integer"),
    ({"query": "q", "limit": True}, "limit: must be an integer"),
    ({"query": "q", "limit": None}, "limit: must not be null"),
    ({"query": "q", "threshold": -0.01}, "threshold: must be between 0 and 1"),
    ({"query": "q", "threshold": 1.01}, "threshold: must be between 0 and 1"),
    ({"query": "q", "threshold": "0.5"}, "threshold: must be a number"),
    ({"query": "q", "threshold": False}, "threshold: must be a number"),
    ({}, "query: is required"),
    ({"query": " "}, "query: must not be empty"),
    ({"query": 3}, "query: must be a string"),
]


@pytest.mark.parametrize("input, message", BAD_SEARCH)
def test_search_rejects_bad_input(client, auth, input, message):
    resp = query(client, "memory.search", {"userId": "u1", **input}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.search")
    assert message in error["message"]


def test_search_accepts_range_edges(client, auth):
    add(client, auth, "tea")
    assert len(search(client, auth, query="tea", limit=1, threshold=0)) == 1
    assert len(search(client, auth, query="tea", limit=100, threshold=1.0)) in (0, 1)
    assert len(search(client, auth, query="tea", limit=5.0, threshold=0)) == 1


# -- getAll ---------------------------------------------------------------------


def test_get_all_is_newest_first_with_limit(client, auth):
    ids = [add(client, auth, f"memory {i}")["id"] for i in range(5)]
    listed = data(query(client, "memory.getAll", {"userId": "u1"}, headers=auth))
    assert [m["id"] for m in listed] == ids[::-1]
    assert all(list(m) == MEMORY_FIELDS for m in listed)
    two = data(query(client, "memory.getAll", {"userId": "u1", "limit": 2}, headers=auth))
    assert [m["id"] for m in two] == ids[:-3:-1]


@pytest.mark.parametrize(
    "input, message",
    [
        ({"userId": "u", "limit": 0}, "limit: must be between 1 and 1000"),
        ({"userId": "u", "limit": 1001}, "limit: must be between 1 and 1000"),
        ({"limit": 5}, "userId: is required"),
    ],
)
def test_get_all_rejects_bad_input(client, auth, input, message):
    error = assert_error(
        query(client, "memory.getAll", input, headers=auth), 400, "BAD_REQUEST", "memory.getAll"
    )
    assert message in error["message"]


def test_get_all_accepts_the_largest_limit(client, auth):
    add(client, auth)
    assert (
        len(data(query(client, "memory.getAll", {"userId": "u1", "limit": 1000}, headers=auth)))
        == 1
    )


# -- getById and delete -----------------------------------------------------------


def test_get_by_id_of_a_missing_memory_is_404(client, auth):
    error = assert_error(
        query(client, "memory.getById", {"id": MISSING_ID}, headers=auth),
        404,
        "NOT_FOUND",
        "memory.getById",
    )
    assert error["message"] == "Memory not found"


@pytest.mark.parametrize("path", ["memory.getById", "memory.delete"])
@pytest.mark.parametrize("bad", ["x", "", 5, None, "00000000-0000-4000-8000-00000000000"])
def test_id_must_be_a_uuid(client, auth, path, bad):
    send = query if path == "memory.getById" else mutate
    resp = send(client, path, {"id": bad}, headers=auth)
    assert_error(resp, 400, "BAD_REQUEST", path)


def test_delete_then_it_is_gone(client, auth):
    m = add(client, auth, "delete me")
    assert data(mutate(client, "memory.delete", {"id": m["id"]}, headers=auth)) == {"success": True}
    assert_error(
        query(client, "memory.getById", {"id": m["id"]}, headers=auth),
        404,
        "NOT_FOUND",
        "memory.getById",
    )
    assert search(client, auth, query="delete me", threshold=0) == []
    assert data(query(client, "memory.getAll", {"userId": "u1"}, headers=auth)) == []
    again = mutate(client, "memory.delete", {"id": m["id"]}, headers=auth)
    error = assert_error(again, 404, "NOT_FOUND", "memory.delete")
    assert error["message"] == "Memory not found"


# -- authentication ---------------------------------------------------------------

ALL_CALLS = [
    (mutate, "memory.add", {"userId": "u1", "content": "x"}),
    (query, "memory.search", {"userId": "u1", "query": "x"}),
    (query, "memory.getAll", {"userId": "u1"}),
    (query, "memory.getById", {"id": MISSING_ID}),
    (mutate, "memory.delete", {"id": MISSING_ID}),
]


@pytest.mark.parametrize("send, path, input", ALL_CALLS)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-api-key": ""},
        {"x-api-key": "sk_memsvc_" + "0" * 64},
        {"x-api-key": "garbage"},
        {"X-API-KEY": "sk_nope"},
        {"Authorization": "Bearer sk_memsvc_x"},
    ],
)
def test_every_memory_call_needs_a_valid_key(client, send, path, input, headers):
    error = assert_error(send(client, path, input, headers=headers), 401, "UNAUTHORIZED", path)
    assert "API key" in error["message"]


def test_a_key_revoked_in_the_store_stops_working_at_once(app, client, auth, key):
    add(client, auth)
    with app.app_context():
        [k] = keys.list_for(store(), "tenant-A")
        keys.revoke(store(), "tenant-A", k.id)
    error = assert_error(
        query(client, "memory.getAll", {"userId": "u1"}, headers=auth),
        401,
        "UNAUTHORIZED",
        "memory.getAll",
    )
    assert "revoked" in error["message"]


def test_the_secret_never_appears_in_responses(client, auth, key):
    bodies = [add(client, auth)]
    for send, path, input in ALL_CALLS:
        bodies.append(send(client, path, input, headers=auth).data.decode())
    assert key not in str(bodies)


# -- isolation --------------------------------------------------------------------


@pytest.fixture
def two_tenants(client, new_key):
    a = {"x-api-key": new_key("tenant-A")}
    b = {"x-api-key": new_key("tenant-B")}
    mine = add(client, a, "A's secret about peanuts", user="u1")
    other_user = add(client, a, "A's other user about peanuts", user="u2")
    other_tenant = add(client, b, "B's secret about peanuts", user="u1")
    return a, b, mine, other_user, other_tenant


def test_search_is_isolated_by_tenant_and_user(client, two_tenants):
    a, b, mine, other_user, other_tenant = two_tenants
    found = search(client, a, query="peanuts", threshold=0)
    assert [r["id"] for r in found] == [mine["id"]]
    found_b = search(client, b, query="peanuts", threshold=0)
    assert [r["id"] for r in found_b] == [other_tenant["id"]]
    assert found_b[0]["idpUserId"] == "tenant-B"


def test_get_all_is_isolated_by_tenant_and_user(client, two_tenants):
    a, b, mine, other_user, other_tenant = two_tenants
    assert [m["id"] for m in data(query(client, "memory.getAll", {"userId": "u1"}, headers=a))] == [
        mine["id"]
    ]
    assert [m["id"] for m in data(query(client, "memory.getAll", {"userId": "u2"}, headers=a))] == [
        other_user["id"]
    ]
    assert [m["id"] for m in data(query(client, "memory.getAll", {"userId": "u1"}, headers=b))] == [
        other_tenant["id"]
    ]
    assert data(query(client, "memory.getAll", {"userId": "u2"}, headers=b)) == []


def test_get_by_id_of_another_tenants_memory_is_404(client, two_tenants):
    a, b, mine, other_user, other_tenant = two_tenants
    assert_error(
        query(client, "memory.getById", {"id": mine["id"]}, headers=b),
        404,
        "NOT_FOUND",
        "memory.getById",
    )
    assert_error(
        query(client, "memory.getById", {"id": other_tenant["id"]}, headers=a),
        404,
        "NOT_FOUND",
        "memory.getById",
    )
    # Within a tenant, an id names the memory whichever end user holds it.
    assert data(query(client, "memory.getById", {"id": other_user["id"]}, headers=a)) == other_user


def test_delete_of_another_tenants_memory_is_404_and_keeps_it(client, two_tenants):
    a, b, mine, other_user, other_tenant = two_tenants
    assert_error(
        mutate(client, "memory.delete", {"id": mine["id"]}, headers=b),
        404,
        "NOT_FOUND",
        "memory.delete",
    )
    assert data(query(client, "memory.getById", {"id": mine["id"]}, headers=a)) == mine


def test_add_is_scoped_to_the_keys_tenant(client, two_tenants):
    a, b, *_ = two_tenants
    m = add(client, b, "new for B", user="u1", idpUserId="tenant-A")
    assert m["idpUserId"] == "tenant-B"
    assert "new for B" not in str(data(query(client, "memory.getAll", {"userId": "u1"}, headers=a)))
