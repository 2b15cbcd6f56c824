"""The memory lifecycle beyond the specification, through the API: update and history,
deleteAll, filters, paging, expiry, dedupe, service.info."""

from __future__ import annotations

import json
import time

import pytest

from memsvc import clock
from memsvc.api.context import store
from memsvc.services import memories
from tests.support.helpers import assert_error
from tests.support.helpers import assert_error_item
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

MISSING = "00000000-0000-4000-8000-000000000000"


def add(client, auth, content, user="u", **fields):
    body = {"userId": user, "content": content, **fields}
    return data(mutate(client, "memory.add", body, headers=auth))


def search(client, auth, text, user="u", **fields):
    body = {"userId": user, "query": text, "threshold": 0, **fields}
    return data(query(client, "memory.search", body, headers=auth))


def get_all(client, auth, user="u", **fields):
    return data(query(client, "memory.getAll", {"userId": user, **fields}, headers=auth))


def iso(ms):
    return clock.iso(ms)


# -- update and history -------------------------------------------------------------------


def test_update_replaces_text_and_vectors_and_keeps_the_old_version(client, auth):
    m = add(client, auth, "Alice lives in Lisbon", metadata={"city": "lisbon"})
    updated = data(
        mutate(
            client,
            "memory.update",
            {"id": m["id"], "content": "Alice moved to Porto in 2025"},
            headers=auth,
        )
    )
    assert updated["id"] == m["id"] and updated["createdAt"] == m["createdAt"]
    assert updated["content"] == "Alice moved to Porto in 2025"
    assert updated["metadata"] == {"city": "lisbon"}
    assert updated["updatedAt"] > m["updatedAt"]
    assert data(query(client, "memory.getById", {"id": m["id"]}, headers=auth)) == updated
    # The new text is what search knows; the old one is gone from it.
    [found] = search(client, auth, "Alice moved to Porto in 2025")
    assert found["id"] == m["id"] and found["similarity"] > 0.99
    assert search(client, auth, "Alice lives in Lisbon")[0]["similarity"] < 0.99
    versions = data(query(client, "memory.history", {"id": m["id"]}, headers=auth))
    assert versions == [
        {
            "version": 1,
            "content": "Alice lives in Lisbon",
            "metadata": {"city": "lisbon"},
            "event": "add",
            "at": m["createdAt"],
        },
        {
            "version": 2,
            "content": "Alice moved to Porto in 2025",
            "metadata": {"city": "lisbon"},
            "event": "update",
            "at": updated["updatedAt"],
        },
    ]


def test_update_of_metadata_alone_keeps_the_vectors_and_is_seen_by_filters(client, auth):
    m = add(client, auth, "Bob plays chess", metadata={"topic": "games", "level": 3})
    search(client, auth, "chess", filter={"topic": "games"})  # cached with the old metadata
    updated = data(
        mutate(
            client, "memory.update", {"id": m["id"], "metadata": {"topic": "sport"}}, headers=auth
        )
    )
    assert updated["metadata"] == {"topic": "sport"} and updated["content"] == m["content"]
    assert search(client, auth, "chess", filter={"topic": "games"}) == []
    [found] = search(client, auth, "chess", filter={"topic": "sport"})
    assert found["id"] == m["id"]
    cleared = data(mutate(client, "memory.update", {"id": m["id"], "metadata": None}, headers=auth))
    assert cleared["metadata"] == {}
    versions = data(query(client, "memory.history", {"id": m["id"]}, headers=auth))
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert [v["metadata"] for v in versions] == [
        {"topic": "games", "level": 3},
        {"topic": "sport"},
        {},
    ]


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "give at least one of content, metadata, expiresAt"),
        ({"content": "  "}, "content: must not be empty"),
        ({"metadata": [1]}, "metadata: must be a JSON object"),
        ({"expiresAt": "2000-01-01T00:00:00Z"}, "expiresAt: must be in the future"),
        ({"expiresAt": "2099-01-01T00:00:00"}, "expiresAt: must say its time zone"),
    ],
)
def test_update_refuses_bad_input_naming_the_field(client, auth, body, message):
    m = add(client, auth, "something")
    resp = mutate(client, "memory.update", {"id": m["id"], **body}, headers=auth)
    assert message in assert_error(resp, 400, "BAD_REQUEST", "memory.update")["message"]


def test_update_and_history_of_another_tenants_memory_are_not_found(configured, client, auth):
    m = add(client, auth, "tenant A's secret")
    other_client, other = configured()
    # configured() makes a new app on the same database, for tenant-A: make a tenant-B key.
    from memsvc.services import keys

    with other_client.application.app_context():
        b = {"x-api-key": keys.create(store(), "tenant-B", "k", "memsvc").secret}
    for proc, method in (("memory.update", "POST"), ("memory.history", "GET")):
        body = {"id": m["id"], "content": "stolen"} if method == "POST" else {"id": m["id"]}
        call = mutate if method == "POST" else query
        assert_error(call(other_client, proc, body, headers=b), 404, "NOT_FOUND", proc)
    assert_error(
        mutate(client, "memory.update", {"id": MISSING, "content": "x"}, headers=auth),
        404,
        "NOT_FOUND",
        "memory.update",
    )
    assert data(query(client, "memory.getById", {"id": m["id"]}, headers=auth))["content"] == (
        "tenant A's secret"
    )


def test_a_user_id_given_with_an_id_scopes_the_call_to_that_end_user(client, auth):
    m = add(client, auth, "Bob's own note", user="bob")
    calls = (
        (query, "memory.getById", {}),
        (query, "memory.history", {}),
        (mutate, "memory.update", {"content": "overwritten by alice"}),
        (mutate, "memory.delete", {}),
    )
    for call, proc, extra in calls:
        body = {"id": m["id"], "userId": "alice", **extra}
        assert_error(call(client, proc, body, headers=auth), 404, "NOT_FOUND", proc)
    # Nothing happened to Bob's memory, and with his own userId every call works.
    assert data(query(client, "memory.getById", {"id": m["id"]}, headers=auth))["content"] == (
        "Bob's own note"
    )
    own = {"id": m["id"], "userId": "bob"}
    assert data(query(client, "memory.getById", own, headers=auth))["id"] == m["id"]
    assert len(data(query(client, "memory.history", own, headers=auth))) == 1
    body = {**own, "content": "Bob's note, edited"}
    assert data(mutate(client, "memory.update", body, headers=auth))["content"] == (
        "Bob's note, edited"
    )
    assert data(mutate(client, "memory.delete", own, headers=auth)) == {"success": True}
    assert_error(
        query(client, "memory.getById", own, headers=auth), 404, "NOT_FOUND", "memory.getById"
    )


@pytest.mark.parametrize("user", ["", "x" * 5000, 7])
def test_a_bad_scoping_user_id_is_400(client, auth, user):
    m = add(client, auth, "anything")
    resp = query(client, "memory.getById", {"id": m["id"], "userId": user}, headers=auth)
    assert "userId" in assert_error(resp, 400, "BAD_REQUEST", "memory.getById")["message"]


# -- deleteAll ------------------------------------------------------------------------------


def test_delete_all_erases_one_user_and_touches_no_one_else(configured, client, auth):
    from memsvc.services import keys

    with client.application.app_context():
        b = {"x-api-key": keys.create(store(), "tenant-B", "k", "memsvc").secret}
    mine = [add(client, auth, f"fact {i} about alice", user="alice") for i in range(5)]
    data(mutate(client, "memory.update", {"id": mine[0]["id"], "content": "changed"}, headers=auth))
    bob = add(client, auth, "fact about bob", user="bob")
    theirs = add(client, b, "tenant B's alice", user="alice")
    search(client, auth, "fact", user="alice")  # cached
    result = data(mutate(client, "memory.deleteAll", {"userId": "alice"}, headers=auth))
    assert result == {"success": True, "deleted": 5}
    assert get_all(client, auth, user="alice") == []
    assert search(client, auth, "fact", user="alice") == []
    for m in mine:
        assert_error(
            query(client, "memory.history", {"id": m["id"]}, headers=auth),
            404,
            "NOT_FOUND",
            "memory.history",
        )
    assert [m["id"] for m in get_all(client, auth, user="bob")] == [bob["id"]]
    assert [m["id"] for m in get_all(client, b, user="alice")] == [theirs["id"]]
    again = data(mutate(client, "memory.deleteAll", {"userId": "alice"}, headers=auth))
    assert again == {"success": True, "deleted": 0}
    with client.application.app_context():
        conn = store().conn
        assert conn.execute("SELECT count(*) FROM memory_history").fetchone() == (0,)
        rows = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        vectors = conn.execute("SELECT count(*) FROM memory_vectors").fetchone()[0]
        assert rows == vectors == 2


# -- filters --------------------------------------------------------------------------------


def test_a_filtered_search_returns_the_best_matching_memories_not_fewer(client, auth):
    for i in range(12):
        add(client, auth, f"I love green tea, cup number {i}", metadata={"kind": "tea"})
    wanted = [
        add(client, auth, f"Coffee beans from farm {i}", metadata={"kind": "coffee", "n": i})
        for i in range(3)
    ]
    found = search(client, auth, "I love green tea", limit=3, filter={"kind": "coffee"})
    assert sorted(m["id"] for m in found) == sorted(m["id"] for m in wanted)
    narrowed = search(client, auth, "tea", filter={"kind": "coffee", "n": {"gte": 1}})
    assert {m["metadata"]["n"] for m in narrowed} == {1, 2}
    listed = get_all(client, auth, filter={"n": {"in": [0, 2]}}, limit=10)
    assert [m["metadata"]["n"] for m in listed] == [2, 0]


@pytest.mark.parametrize(
    "flt, message",
    [
        ({"category": {"like": "x"}}, "filter.category: unknown operator 'like'"),
        ({"category": {"in": "health"}}, "filter.category.in: must be an array"),
        ({"a": {"eq": 1, "ne": 2}}, "filter.a: an operator object must have exactly one"),
        ({"when": {"gt": "yesterday"}}, "filter.when.gt: 'yesterday' is not an ISO 8601"),
        ({"when": {"gt": "2026-01-01T00:00:00"}}, "is not an ISO 8601 timestamp with a time zone"),
        ({"flag": {"exists": "yes"}}, "filter.flag.exists: must be true or false"),
        ([1], "filter: must be an object"),
        ({"": 1}, "a metadata key must not be empty"),
    ],
)
def test_a_bad_filter_is_400_naming_it(client, auth, flt, message):
    for proc, body in (
        ("memory.search", {"userId": "u", "query": "x", "filter": flt}),
        ("memory.getAll", {"userId": "u", "filter": flt}),
    ):
        error = assert_error(query(client, proc, body, headers=auth), 400, "BAD_REQUEST", proc)
        assert message in error["message"], error["message"]


def test_created_after_and_before_bound_search_and_listing(client, auth):
    first = add(client, auth, "first note")
    time.sleep(0.01)
    second = add(client, auth, "second note")
    time.sleep(0.01)
    third = add(client, auth, "third note")
    window = {"createdAfter": first["createdAt"], "createdBefore": third["createdAt"]}
    assert [m["id"] for m in get_all(client, auth, **window)] == [second["id"]]
    assert [m["id"] for m in search(client, auth, "note", **window)] == [second["id"]]
    with_offset = second["createdAt"].replace("Z", "+00:00")
    assert [m["id"] for m in get_all(client, auth, createdAfter=with_offset)] == [third["id"]]
    resp = query(
        client, "memory.getAll", {"userId": "u", "createdAfter": "2026-01-01"}, headers=auth
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")
    assert "createdAfter: must say its time zone" in error["message"]


# -- paging ---------------------------------------------------------------------------------


def test_paging_with_a_cursor_visits_every_memory_once_even_with_deletes_between(client, auth):
    added = [add(client, auth, f"memory number {i}") for i in range(23)]
    newest_first = [m["id"] for m in reversed(added)]
    seen, cursor = [], None
    deleted = set()
    while True:
        page = get_all(client, auth, limit=5, **({"cursor": cursor} if cursor else {}))
        if not page:
            break
        seen += [m["id"] for m in page]
        cursor = page[-1]["id"]
        # Delete a memory not yet listed (never the cursor's own).
        upcoming = [i for i in newest_first if i not in seen and i not in deleted]
        if len(seen) == 10 and upcoming:
            victim = upcoming[1]
            data(mutate(client, "memory.delete", {"id": victim}, headers=auth))
            deleted.add(victim)
    assert seen == [i for i in newest_first if i not in deleted]
    assert len(seen) == 22


def test_a_cursor_of_another_user_or_a_deleted_memory_is_400(client, auth):
    mine = add(client, auth, "mine")
    theirs = add(client, auth, "theirs", user="someone-else")
    for cursor in (theirs["id"], MISSING):
        resp = query(client, "memory.getAll", {"userId": "u", "cursor": cursor}, headers=auth)
        error = assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")
        assert "cursor: no memory of this user has this id" in error["message"]
    data(mutate(client, "memory.delete", {"id": mine["id"]}, headers=auth))
    resp = query(client, "memory.getAll", {"userId": "u", "cursor": mine["id"]}, headers=auth)
    assert (
        "may have been deleted"
        in assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")["message"]
    )


# -- expiry ---------------------------------------------------------------------------------


def test_an_expired_memory_vanishes_at_once_and_is_removed_for_good(client, auth, app):
    soon = iso(clock.now_ms() + 600)
    m = add(client, auth, "a short-lived note", expiresAt=soon)
    keep = add(client, auth, "a lasting note")
    assert m["expiresAt"] == soon
    assert "expiresAt" not in keep
    assert [x["id"] for x in search(client, auth, "short-lived note")][0] == m["id"]
    time.sleep(0.7)
    assert [x["id"] for x in get_all(client, auth)] == [keep["id"]]
    assert [x["id"] for x in search(client, auth, "short-lived note")] == [keep["id"]]
    for proc, body in (
        ("memory.getById", {"id": m["id"]}),
        ("memory.history", {"id": m["id"]}),
    ):
        assert_error(query(client, proc, body, headers=auth), 404, "NOT_FOUND", proc)
    for proc, body in (
        ("memory.update", {"id": m["id"], "content": "revived"}),
        ("memory.delete", {"id": m["id"]}),
    ):
        assert_error(mutate(client, proc, body, headers=auth), 404, "NOT_FOUND", proc)
    with app.app_context():
        s = store()
        assert s.conn.execute("SELECT count(*) FROM memories").fetchone() == (2,)
        assert memories.purge_expired(s) == 1
        assert s.conn.execute("SELECT count(*) FROM memories").fetchone() == (1,)
        assert s.conn.execute("SELECT count(*) FROM memory_vectors").fetchone() == (1,)


def test_expiry_can_be_set_changed_and_removed(client, auth):
    m = add(client, auth, "note")
    later = iso(clock.now_ms() + 3_600_000)
    updated = data(
        mutate(client, "memory.update", {"id": m["id"], "expiresAt": later}, headers=auth)
    )
    assert updated["expiresAt"] == later
    cleared = data(
        mutate(client, "memory.update", {"id": m["id"], "expiresAt": None}, headers=auth)
    )
    assert "expiresAt" not in cleared
    resp = mutate(
        client,
        "memory.add",
        {"userId": "u", "content": "x", "expiresAt": "yesterday"},
        headers=auth,
    )
    assert (
        "expiresAt: must be an ISO 8601 timestamp"
        in assert_error(resp, 400, "BAD_REQUEST", "memory.add")["message"]
    )


# -- dedupe -----------------------------------------------------------------------------------


def test_dedupe_returns_the_existing_memory_for_the_same_text_and_metadata(client, auth):
    first = add(client, auth, "Alice likes jazz", metadata={"a": 1, "b": [1, 2]}, dedupe=True)
    same = add(client, auth, "  Alice likes jazz ", metadata={"b": [1, 2], "a": 1}, dedupe=True)
    assert same == first
    for content, metadata in (
        ("alice likes jazz", {"a": 1, "b": [1, 2]}),  # letter case
        ("Alice  likes jazz", {"a": 1, "b": [1, 2]}),  # inner spaces
        ("Alice likes jazz", {"a": 1, "b": [2, 1]}),  # array order
    ):
        assert add(client, auth, content, metadata=metadata, dedupe=True)["id"] != first["id"]
    assert (
        add(client, auth, "Alice likes jazz", metadata={"a": 1, "b": [1, 2]})["id"] != first["id"]
    )
    other = add(
        client, auth, "Alice likes jazz", user="v", metadata={"a": 1, "b": [1, 2]}, dedupe=True
    )
    assert other["id"] != first["id"]
    resp = mutate(
        client, "memory.add", {"userId": "u", "content": "x", "dedupe": "yes"}, headers=auth
    )
    assert (
        "dedupe: must be true or false"
        in assert_error(resp, 400, "BAD_REQUEST", "memory.add")["message"]
    )


def test_dedupe_answers_the_existing_memory_as_it_is_whatever_expiry_was_asked(client, auth):
    """Expiry is not part of what makes a duplicate: the existing memory stands unchanged."""
    later = clock.iso(clock.now_ms() + 3_600_000)
    kept = add(client, auth, "Alice likes jazz", dedupe=True)
    again = add(client, auth, "Alice likes jazz", dedupe=True, expiresAt=later)
    assert again == kept and "expiresAt" not in again
    soon = clock.iso(clock.now_ms() + 60_000)
    brief = add(client, auth, "Bob likes folk", dedupe=True, expiresAt=soon)
    assert add(client, auth, "Bob likes folk", dedupe=True, expiresAt=later) == brief
    assert add(client, auth, "Bob likes folk", dedupe=True)["expiresAt"] == brief["expiresAt"]


# -- service.info ---------------------------------------------------------------------------


def test_service_info_describes_the_model_defaults_and_the_callers_limits(configured):
    client, auth = configured(SEARCH_DEFAULT_THRESHOLD=0.4)
    info = data(query(client, "service.info", {}, headers=auth))
    assert info == {
        "version": info["version"],
        "embedder": {
            "model": "local:all-MiniLM-L6-v2",
            "dimensions": 384,
            "maxTokens": 256,
            "recommendedThreshold": 0.35,
        },
        "defaults": {"threshold": 0.4, "limit": 10},
        "limits": {"perMinute": 100, "concurrent": 10},
    }
    assert info["version"][0].isdigit()
    with client.application.app_context():
        [key] = store().list_keys("tenant-A")
        from memsvc.services import keys

        keys.set_limits(store(), key.id, 1000, 0)
    info = data(query(client, "service.info", headers=auth))
    assert info["limits"] == {"perMinute": 1000, "concurrent": 0}
    assert_error(query(client, "service.info", {}), 401, "UNAUTHORIZED", "service.info")


def test_the_default_threshold_is_a_setting(configured):
    client, auth = configured(SEARCH_DEFAULT_THRESHOLD=0.0)
    add(client, auth, "completely unrelated text about volcanoes")
    body = {"userId": "u", "query": "banana bread recipe"}
    assert len(data(query(client, "memory.search", body, headers=auth))) == 1


# -- batches and limits ---------------------------------------------------------------------


def test_new_procedures_work_in_batches_and_count_against_the_limits(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=6)
    m = add(client, auth, "batched")
    resp = client.get(
        "/trpc/memory.history,service.info,memory.getAll",
        query_string={
            "batch": "1",
            "input": json.dumps({"0": {"id": m["id"]}, "2": {"userId": "u", "limit": 1}}),
        },
        headers=auth,
    )
    assert resp.status_code == 200, resp.get_json()
    history, info, listed = resp.get_json()
    assert history["result"]["data"][0]["content"] == "batched"
    assert info["result"]["data"]["embedder"]["dimensions"] == 384
    assert listed["result"]["data"][0]["id"] == m["id"]
    resp = client.post(
        "/trpc/memory.update,memory.deleteAll,memory.update?batch=1",
        json={"0": {"id": m["id"], "content": "changed"}, "1": {"userId": "nobody"}, "2": {}},
        headers=auth,
    )
    body = resp.get_json()
    assert resp.status_code == 207
    assert body[0]["result"]["data"]["content"] == "changed"
    assert body[1]["result"]["data"] == {"success": True, "deleted": 0}
    assert_error_item(body[2], 429, "TOO_MANY_REQUESTS", "memory.update")
