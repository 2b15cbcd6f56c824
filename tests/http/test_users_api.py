"""memory.users: a tenant's end users, paged and searched by prefix, and nobody else's."""

import re
import time

import pytest

from memsvc import clock
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def add(client, auth, user, content="a note", **extra):
    return data(
        mutate(client, "memory.add", {"userId": user, "content": content, **extra}, headers=auth)
    )


def users(client, auth, **input):
    return data(query(client, "memory.users", input or None, headers=auth))


def ids(page):
    return [u["userId"] for u in page]


def test_lists_each_user_with_their_count_and_last_write(client, auth):
    add(client, auth, "bob")
    add(client, auth, "alice")
    last = add(client, auth, "alice", "second")
    page = users(client, auth)
    assert page == [
        {"userId": "alice", "memories": 2, "lastWriteAt": last["createdAt"]},
        {"userId": "bob", "memories": 1, "lastWriteAt": page[1]["lastWriteAt"]},
    ]
    assert ISO.match(page[1]["lastWriteAt"])


def test_users_come_in_code_point_order(client, auth):
    # Upper case before lower case, é after z, astral after everything of the BMP.
    for user in ["é", "a", "B", "😀", "z", "Z", " lead"]:
        add(client, auth, user)
    assert ids(users(client, auth)) == sorted(["é", "a", "B", "😀", "z", "Z", " lead"])
    assert ids(users(client, auth)) == [" lead", "B", "Z", "a", "z", "é", "😀"]


def test_an_update_moves_last_write_and_a_delete_lowers_the_count(client, auth):
    first = add(client, auth, "u")
    add(client, auth, "u", "other")
    time.sleep(0.005)
    updated = data(
        mutate(client, "memory.update", {"id": first["id"], "content": "new"}, headers=auth)
    )
    (row,) = users(client, auth)
    assert row["lastWriteAt"] == updated["updatedAt"]
    data(mutate(client, "memory.delete", {"id": first["id"]}, headers=auth))
    assert users(client, auth)[0]["memories"] == 1


def test_a_user_whose_memories_are_all_gone_is_not_listed(client, auth):
    add(client, auth, "gone")
    add(client, auth, "stays")
    data(mutate(client, "memory.deleteAll", {"userId": "gone"}, headers=auth))
    assert ids(users(client, auth)) == ["stays"]


def test_expired_memories_are_not_counted_and_a_user_with_only_those_is_not_listed(client, auth):
    soon = clock.iso(clock.now_ms() + 600)
    add(client, auth, "brief", expiresAt=soon)
    add(client, auth, "mixed", expiresAt=soon)
    add(client, auth, "mixed", "kept")
    assert users(client, auth)[0] == {
        "userId": "brief",
        "memories": 1,
        "lastWriteAt": users(client, auth)[0]["lastWriteAt"],
    }
    time.sleep(0.7)
    page = users(client, auth)
    assert [(u["userId"], u["memories"]) for u in page] == [("mixed", 1)]


def test_pages_follow_the_cursor_to_the_end(client, auth):
    names = [f"user-{i:02d}" for i in range(7)]
    for name in reversed(names):
        add(client, auth, name)
    seen, cursor = [], None
    while True:
        page = users(client, auth, limit=3, **({"cursor": cursor} if cursor else {}))
        if not page:
            break
        assert len(page) <= 3
        seen += ids(page)
        cursor = page[-1]["userId"]
    assert seen == names


def test_a_cursor_that_is_no_longer_a_user_still_pages_by_position(client, auth):
    for name in ["a", "b", "c", "d"]:
        add(client, auth, name)
    data(mutate(client, "memory.deleteAll", {"userId": "b"}, headers=auth))
    assert ids(users(client, auth, cursor="b")) == ["c", "d"]
    assert ids(users(client, auth, cursor="bb")) == ["c", "d"]
    assert ids(users(client, auth, cursor="")) == ["a", "c", "d"]
    assert users(client, auth, cursor="zzz") == []


def test_prefix_keeps_users_whose_id_starts_with_it(client, auth):
    for name in ["team/a", "team/b", "team0", "tea", "team", "other", "tëam"]:
        add(client, auth, name)
    assert ids(users(client, auth, prefix="team")) == ["team", "team/a", "team/b", "team0"]
    assert ids(users(client, auth, prefix="team/")) == ["team/a", "team/b"]
    assert ids(users(client, auth, prefix="team", limit=2, cursor="team/a")) == [
        "team/b",
        "team0",
    ]
    # A cursor before the prefix's range starts the range; after it, nothing.
    assert ids(users(client, auth, prefix="team/", cursor="a")) == ["team/a", "team/b"]
    assert users(client, auth, prefix="team/", cursor="zz") == []
    assert users(client, auth, prefix="nobody") == []
    assert ids(users(client, auth, prefix="")) == sorted(
        ["team/a", "team/b", "team0", "tea", "team", "other", "tëam"]
    )


def test_prefix_search_is_literal(client, auth):
    for name in ["50%off", "50_x", "500", "a'b", 'q"'] + ["\U0010ffff-top", "\ud7ff-edge"]:
        add(client, auth, name)
    assert ids(users(client, auth, prefix="50%")) == ["50%off"]
    assert ids(users(client, auth, prefix="50_")) == ["50_x"]
    assert ids(users(client, auth, prefix="a'")) == ["a'b"]
    assert ids(users(client, auth, prefix="\U0010ffff")) == ["\U0010ffff-top"]
    assert ids(users(client, auth, prefix="\ud7ff")) == ["\ud7ff-edge"]


def test_limit_defaults_to_100_and_caps_the_page(client, auth):
    with client.application.app_context():
        from memsvc.api.context import store

        add_many(store(), "tenant-A", 105)
    assert len(users(client, auth)) == 100
    assert len(users(client, auth, limit=1000)) == 105
    assert ids(users(client, auth, limit=2)) == ["bulk-000", "bulk-001"]


def add_many(store, tenant, n):
    import uuid

    import numpy as np

    from memsvc.models import Memory

    now = clock.now_ms()
    rows = [Memory(str(uuid.uuid4()), tenant, f"bulk-{i:03d}", "x", {}, now, now) for i in range(n)]
    dims = store.embedder()[1]
    vectors = [np.ones((1, dims), dtype=np.float32) / np.sqrt(dims) for _ in rows]
    with store.write():
        store.insert_memories(rows, vectors)


# -- tenants -----------------------------------------------------------------


def test_a_tenant_never_sees_another_tenants_users(client, auth, new_key):
    other = {"x-api-key": new_key("tenant-B")}
    add(client, auth, "shared-name")
    add(client, auth, "secret-of-a")
    add(client, other, "shared-name", "B's own")
    # The same user id in two tenants: two users, counted apart.
    assert users(client, other) == [
        {
            "userId": "shared-name",
            "memories": 1,
            "lastWriteAt": users(client, other)[0]["lastWriteAt"],
        }
    ]
    # Probing A's ids by prefix, by cursor or by both finds nothing of A's.
    assert users(client, other, prefix="secret") == []
    assert ids(users(client, other, cursor="a")) == ["shared-name"]
    assert ids(users(client, other, cursor="", prefix="s", limit=1000)) == ["shared-name"]
    assert ids(users(client, auth)) == ["secret-of-a", "shared-name"]
    assert users(client, auth)[1]["memories"] == 1


def test_a_batch_answers_each_call_for_its_own_key_tenant(client, auth, new_key):
    add(client, auth, "only-in-a")
    other = new_key("tenant-B")
    resp = client.get(
        "/trpc/memory.users,memory.users",
        query_string={"batch": "1", "input": '{"0": {}, "1": {"prefix": "only"}}'},
        headers={"x-api-key": other},
    )
    assert resp.status_code == 200
    assert [item["result"]["data"] for item in resp.get_json()] == [[], []]


# -- errors ------------------------------------------------------------------


def test_needs_an_api_key(client):
    assert_error(query(client, "memory.users", {}), 401, "UNAUTHORIZED", "memory.users")


BAD = [
    ({"limit": 0}, "limit: must be between 1 and 1000"),
    ({"limit": 1001}, "limit: must be between 1 and 1000"),
    ({"limit": "5"}, "limit: must be an integer"),
    ({"limit": 2.5}, "limit: must be an integer"),
    ({"cursor": 5}, "cursor: must be a string"),
    ({"prefix": ["a"]}, "prefix: must be a string"),
    ({"prefix": "a\x00"}, "prefix: must not contain NUL"),
    ({"prefix": "\ud800"}, "prefix: must be valid Unicode"),
    ({"prefix": "p" * 257}, "prefix: must be at most 256 characters"),
]


@pytest.mark.parametrize("input, message", BAD)
def test_bad_input_is_a_400_naming_the_field(client, auth, input, message):
    error = assert_error(
        query(client, "memory.users", input, headers=auth), 400, "BAD_REQUEST", "memory.users"
    )
    assert message in error["message"]


def test_input_that_is_not_an_object_is_refused(client, auth):
    assert_error(
        query(client, "memory.users", [1], headers=auth), 400, "BAD_REQUEST", "memory.users"
    )


def test_a_call_counts_against_the_keys_limit(make_app, new_key):
    app = make_app(RATE_LIMIT_PER_MINUTE=2)
    client = app.test_client()
    with app.app_context():
        from memsvc.api.context import store
        from memsvc.services import keys

        secret = keys.create(store(), "tenant-A", "t", "memsvc").secret
    headers = {"x-api-key": secret}
    assert data(query(client, "memory.users", {}, headers=headers)) == []
    assert data(query(client, "memory.users", {}, headers=headers)) == []
    assert_error(
        query(client, "memory.users", {}, headers=headers),
        429,
        "TOO_MANY_REQUESTS",
        "memory.users",
    )
