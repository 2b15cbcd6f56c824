"""Conversations through HTTP: memory.ingest, memory.sessions, memory.session, occurredAt."""

from __future__ import annotations

import pytest

from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

MEMORY_FIELDS = ["id", "content", "userId", "idpUserId", "metadata", "createdAt", "updatedAt"]


def ingest(client, auth, messages, user="alice", **extra):
    return data(
        mutate(
            client, "memory.ingest", {"userId": user, "messages": messages, **extra}, headers=auth
        )
    )


def session(client, auth, session_id, user="alice", **extra):
    return data(
        query(
            client,
            "memory.session",
            {"userId": user, "sessionId": session_id, **extra},
            headers=auth,
        )
    )


def sessions(client, auth, user="alice", **extra):
    return data(query(client, "memory.sessions", {"userId": user, **extra}, headers=auth))


DINNER = [
    {"role": "user", "name": "Alice", "content": "I cooked a mushroom risotto yesterday.",
     "at": "2023-05-08T19:30:00+02:00", "id": "m1"},
    {"role": "assistant", "content": "Lovely! Did you use arborio rice?", "id": "m2"},
    {"role": "user", "name": "Alice", "content": "Carnaroli, it holds its shape better.",
     "at": "2023-05-08T19:32:00+02:00", "id": "m3"},
]  # fmt: skip


# -- ingest ---------------------------------------------------------------------------


def test_ingest_stores_each_message_as_a_memory_in_order(client, auth):
    out = ingest(client, auth, DINNER, sessionId="dinner")
    assert list(out) == ["sessionId", "memories", "duplicates"]
    assert out["sessionId"] == "dinner" and out["duplicates"] == 0
    first, second, third = out["memories"]
    assert first["content"] == DINNER[0]["content"]
    assert first["kind"] == "message"
    assert first["sessionId"] == "dinner"
    assert (first["role"], first["speaker"], first["position"]) == ("user", "Alice", 0)
    assert first["messageId"] == "m1"
    assert first["occurredAt"] == "2023-05-08T17:30:00.000Z"
    # No time of its own: the previous message's.
    assert second["occurredAt"] == first["occurredAt"] and "speaker" not in second
    assert (second["role"], second["position"]) == ("assistant", 1)
    assert third["position"] == 2 and third["occurredAt"] == "2023-05-08T17:32:00.000Z"
    fetched = data(query(client, "memory.getById", {"id": first["id"]}, headers=auth))
    assert fetched == first


def test_a_message_without_time_first_takes_the_time_of_the_call(client, auth):
    (m,) = ingest(client, auth, [{"role": "user", "content": "hello there"}])["memories"]
    assert m["occurredAt"] == m["createdAt"]
    assert "messageId" not in m and "speaker" not in m


def test_without_session_id_each_call_is_a_new_session(client, auth):
    a = ingest(client, auth, [{"role": "user", "content": "first"}])
    b = ingest(client, auth, [{"role": "user", "content": "second"}])
    assert a["sessionId"] != b["sessionId"]
    assert b["memories"][0]["position"] == 0


def test_a_later_call_continues_the_sessions_positions(client, auth):
    ingest(client, auth, DINNER[:2], sessionId="s")
    out = ingest(client, auth, [{"role": "user", "content": "one more thing"}], sessionId="s")
    assert out["memories"][0]["position"] == 2
    assert [m["position"] for m in session(client, auth, "s")] == [0, 1, 2]


def test_ingest_is_idempotent_by_message_id(client, auth):
    first = ingest(client, auth, DINNER, sessionId="dinner")
    again = ingest(client, auth, DINNER, sessionId="dinner")
    assert again["duplicates"] == 3
    assert again["memories"] == first["memories"]
    assert len(session(client, auth, "dinner")) == 3
    (listed,) = sessions(client, auth)
    assert listed["messages"] == 3


def test_a_retry_with_new_messages_stores_only_the_new_ones(client, auth):
    ingest(client, auth, DINNER[:2], sessionId="dinner")
    out = ingest(client, auth, DINNER, sessionId="dinner")
    assert out["duplicates"] == 2
    assert [m["position"] for m in out["memories"]] == [0, 1, 2]
    assert len(session(client, auth, "dinner")) == 3


def test_a_repeated_id_in_one_call_is_stored_once(client, auth):
    msg = {"role": "user", "content": "same", "id": "x"}
    out = ingest(client, auth, [msg, {**msg, "content": "other text"}], sessionId="s")
    assert out["duplicates"] == 1
    assert out["memories"][0] == out["memories"][1]
    assert len(session(client, auth, "s")) == 1


def test_message_ids_are_per_session(client, auth):
    ingest(client, auth, DINNER, sessionId="one")
    out = ingest(client, auth, DINNER, sessionId="two")
    assert out["duplicates"] == 0


def test_metadata_is_given_to_every_message(client, auth):
    out = ingest(client, auth, DINNER, metadata={"channel": "sms"})
    assert all(m["metadata"] == {"channel": "sms"} for m in out["memories"])


@pytest.mark.parametrize(
    "messages, message",
    [
        ([], "messages: must hold at least one message"),
        ("hi", "messages: must be an array"),
        ([{"role": "user"}], "messages[0].content: is required"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": " "}],
         "messages[1].content: must not be empty"),
        ([{"role": "robot", "content": "x"}], "messages[0].role: must be one of user"),
        ([{"content": "x"}], "messages[0].role: is required"),
        ([{"role": "user", "content": "x", "at": "2023-05-08T19:30:00"}],
         "messages[0].at: must say its time zone"),
        ([{"role": "user", "content": "x", "name": 5}], "messages[0].name: must be a string"),
        ([{"role": "user", "content": "x", "id": ""}], "messages[0].id: must not be empty"),
        (["x"], "messages[0]"),
    ],
)  # fmt: skip
def test_ingest_errors_name_the_message_and_store_nothing(client, auth, messages, message):
    resp = mutate(client, "memory.ingest", {"userId": "alice", "messages": messages}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.ingest")
    assert message in error["message"], error["message"]
    assert sessions(client, auth) == []
    assert data(query(client, "memory.getAll", {"userId": "alice"}, headers=auth)) == []


def test_too_many_messages_are_refused_before_any_is_read(configured):
    client, auth = configured(MAX_INGEST_MESSAGES=3)
    resp = mutate(
        client,
        "memory.ingest",
        {"userId": "a", "messages": [{"role": "user", "content": "x"}] * 4},
        headers=auth,
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.ingest")
    assert "at most 3 messages (MEMSVC_MAX_INGEST_MESSAGES)" in error["message"]


def test_the_messages_embedding_windows_count_together(configured):
    client, auth = configured(MAX_EMBEDDING_WINDOWS=2)
    resp = mutate(
        client,
        "memory.ingest",
        {"userId": "a", "messages": [{"role": "user", "content": f"m{i}"} for i in range(3)]},
        headers=auth,
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.ingest")
    assert "messages: too long to embed in one call: it needs 3" in error["message"]


def test_extract_without_a_model_names_the_setting(client, auth):
    resp = mutate(
        client,
        "memory.ingest",
        {"userId": "a", "messages": [{"role": "user", "content": "x"}], "extract": True},
        headers=auth,
    )
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.ingest")
    assert "MEMSVC_LLM_URL" in error["message"]


# -- sessions and session --------------------------------------------------------------


def _at(day: int) -> str:
    return f"2024-03-{day:02d}T10:00:00Z"


def test_sessions_list_the_latest_conversation_first(client, auth):
    ingest(client, auth, [{"role": "user", "content": "a", "at": _at(1)}], sessionId="old")
    ingest(
        client,
        auth,
        [{"role": "user", "content": "b", "at": _at(5)}, {"role": "user", "content": "c",
         "at": _at(3)}],
        sessionId="new",
    )  # fmt: skip
    listed = sessions(client, auth)
    assert listed == [
        {"sessionId": "new", "messages": 2, "firstAt": "2024-03-03T10:00:00.000Z",
         "lastAt": "2024-03-05T10:00:00.000Z"},
        {"sessionId": "old", "messages": 1, "firstAt": "2024-03-01T10:00:00.000Z",
         "lastAt": "2024-03-01T10:00:00.000Z"},
    ]  # fmt: skip


def test_sessions_page_with_a_cursor(client, auth):
    for day in range(1, 8):
        msg = {"role": "user", "content": "x", "at": _at(day)}
        ingest(client, auth, [msg], sessionId=f"s{day}")
    # Two sessions at the same time: ordered by id.
    ingest(client, auth, [{"role": "user", "content": "x", "at": _at(4)}], sessionId="s4b")
    seen, cursor = [], None
    while True:
        page = sessions(client, auth, limit=3, **({"cursor": cursor} if cursor else {}))
        if not page:
            break
        seen += [s["sessionId"] for s in page]
        cursor = page[-1]["sessionId"]
    assert seen == ["s7", "s6", "s5", "s4", "s4b", "s3", "s2", "s1"]


def test_an_unknown_sessions_cursor_is_refused(client, auth):
    ingest(client, auth, [{"role": "user", "content": "x"}], sessionId="s")
    resp = query(client, "memory.sessions", {"userId": "alice", "cursor": "nope"}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.sessions")
    assert "cursor" in error["message"]


def test_session_pages_by_position(client, auth):
    msgs = [{"role": "user", "content": f"message {i}"} for i in range(7)]
    ingest(client, auth, msgs, sessionId="s")
    first = session(client, auth, "s", limit=3)
    assert [m["position"] for m in first] == [0, 1, 2]
    rest = session(client, auth, "s", after=2, limit=10)
    assert [m["content"] for m in rest] == [f"message {i}" for i in range(3, 7)]


@pytest.mark.parametrize(
    "who", [{"user": "bob"}, {"tenant": "tenant-B"}], ids=["other user", "other tenant"]
)
def test_a_session_is_the_users_own(client, auth, new_key, who):
    ingest(client, auth, DINNER, sessionId="dinner")
    other_auth = {"x-api-key": new_key(who["tenant"])} if "tenant" in who else auth
    user = who.get("user", "alice")
    resp = query(
        client, "memory.session", {"userId": user, "sessionId": "dinner"}, headers=other_auth
    )
    error = assert_error(resp, 404, "NOT_FOUND", "memory.session")
    assert error["message"] == "Session not found"
    assert data(query(client, "memory.sessions", {"userId": user}, headers=other_auth)) == []
    # The same session id there is a session of its own: positions from 0, no duplicates.
    out = data(
        mutate(
            client,
            "memory.ingest",
            {"userId": user, "sessionId": "dinner", "messages": DINNER},
            headers=other_auth,
        )
    )
    assert out["duplicates"] == 0 and out["memories"][0]["position"] == 0
    assert len(session(client, auth, "dinner")) == 3


def test_deleting_messages_counts_down_and_the_last_ends_the_session(client, auth):
    out = ingest(client, auth, DINNER, sessionId="dinner")
    ids = [m["id"] for m in out["memories"]]
    mutate(client, "memory.delete", {"id": ids[2]}, headers=auth)
    (listed,) = sessions(client, auth)
    assert listed["messages"] == 2 and listed["lastAt"] == "2023-05-08T17:30:00.000Z"
    for memory_id in ids[:2]:
        data(mutate(client, "memory.delete", {"id": memory_id}, headers=auth))
    assert sessions(client, auth) == []
    resp = query(client, "memory.session", {"userId": "alice", "sessionId": "dinner"}, headers=auth)
    assert_error(resp, 404, "NOT_FOUND", "memory.session")


def test_delete_all_erases_sessions(client, auth):
    ingest(client, auth, DINNER, sessionId="dinner")
    done = data(mutate(client, "memory.deleteAll", {"userId": "alice"}, headers=auth))
    assert done == {"success": True, "deleted": 3}
    assert sessions(client, auth) == []
    # Back again, the session starts anew.
    assert ingest(client, auth, DINNER, sessionId="dinner")["memories"][0]["position"] == 0


def test_expired_messages_leave_the_session_at_once(client, auth):
    out = ingest(client, auth, DINNER, sessionId="dinner")
    from memsvc import clock

    soon = clock.iso(clock.now_ms() + 300)
    data(
        mutate(
            client,
            "memory.update",
            {"id": out["memories"][0]["id"], "expiresAt": soon},
            headers=auth,
        )
    )
    import time

    time.sleep(0.4)
    assert [m["position"] for m in session(client, auth, "dinner")] == [1, 2]
    assert sessions(client, auth)[0]["messages"] == 2


# -- occurredAt, kinds and time on ordinary memories -----------------------------------


def test_an_app_that_never_ingests_sees_no_new_fields(client, auth):
    m = data(mutate(client, "memory.add", {"userId": "u", "content": "plain"}, headers=auth))
    assert list(m) == MEMORY_FIELDS
    m = data(mutate(client, "memory.update", {"id": m["id"], "content": "still"}, headers=auth))
    assert list(m) == MEMORY_FIELDS


def test_occurred_at_on_add_and_update(client, auth):
    m = data(
        mutate(
            client,
            "memory.add",
            {"userId": "u", "content": "moved", "occurredAt": "2021-06-01T09:00:00+01:00"},
            headers=auth,
        )
    )
    assert m["occurredAt"] == "2021-06-01T08:00:00.000Z"
    m = data(
        mutate(
            client,
            "memory.update",
            {"id": m["id"], "occurredAt": "2020-01-01T00:00:00Z"},
            headers=auth,
        )
    )
    assert m["occurredAt"] == "2020-01-01T00:00:00.000Z"
    m = data(mutate(client, "memory.update", {"id": m["id"], "occurredAt": None}, headers=auth))
    assert "occurredAt" not in m


def test_get_all_filters_by_kind_and_time(client, auth):
    plain = data(
        mutate(
            client,
            "memory.add",
            {"userId": "alice", "content": "old note", "occurredAt": "2020-01-01T00:00:00Z"},
            headers=auth,
        )
    )
    messages = ingest(client, auth, DINNER)["memories"]

    def listed(**extra):
        found = data(query(client, "memory.getAll", {"userId": "alice", **extra}, headers=auth))
        return {m["id"] for m in found}

    everything = {plain["id"], *(m["id"] for m in messages)}
    assert listed() == everything
    assert listed(kinds=["memory"]) == {plain["id"]}
    assert listed(kinds=["message"]) == {m["id"] for m in messages}
    assert listed(kinds=["fact"]) == set()
    assert listed(occurredBefore="2021-01-01T00:00:00Z") == {plain["id"]}
    assert listed(occurredAfter="2023-05-08T17:31:00Z") == {messages[2]["id"]}
    early = {plain["id"], messages[0]["id"], messages[1]["id"]}
    assert listed(asOf="2023-05-08T17:30:00Z") == early
    resp = query(client, "memory.getAll", {"userId": "alice", "kinds": ["note"]}, headers=auth)
    assert (
        "kinds[0]: must be one of memory, message, fact"
        in assert_error(resp, 400, "BAD_REQUEST", "memory.getAll")["message"]
    )


# -- context around search results -------------------------------------------------------


def test_search_results_carry_their_conversation_when_asked(client, auth):
    talk = [{"role": "user", "content": f"line {i} about the weather"} for i in range(6)]
    talk[3] = {"role": "user", "content": "My sister Inês lives in Coimbra."}
    ingest(client, auth, talk, sessionId="s")
    data(mutate(client, "memory.add", {"userId": "alice", "content": "Inês likes jazz"},
                headers=auth))  # fmt: skip

    def search(**extra):
        body = {"userId": "alice", "query": "Where does Inês live?", "threshold": 0, **extra}
        return data(query(client, "memory.search", body, headers=auth))

    plain = search(limit=2)
    assert all("context" not in r for r in plain)
    found = search(limit=2, context=2)
    hit = next(r for r in found if r["content"].startswith("My sister"))
    assert [m["position"] for m in hit["context"]["before"]] == [1, 2]
    assert [m["position"] for m in hit["context"]["after"]] == [4, 5]
    # An ordinary memory has no conversation around it.
    assert all("context" not in r for r in found if "sessionId" not in r)
    # Context never takes a place of the limit, and never repeats the result.
    assert len(found) == 2 and hit["id"] not in str(hit["context"])
    edge = search(limit=10, context=10, mode="keyword", query="line 0")
    first = next(r for r in edge if r["content"].startswith("line 0"))
    assert first["context"]["before"] == [] and len(first["context"]["after"]) == 5


def test_context_is_bounded(client, auth):
    resp = query(client, "memory.search", {"userId": "a", "query": "x", "context": 11},
                 headers=auth)  # fmt: skip
    assert (
        "context: must be between 0 and 10"
        in assert_error(resp, 400, "BAD_REQUEST", "memory.search")["message"]
    )


# -- dates in text ----------------------------------------------------------------------


def test_dates_are_resolved_against_each_memorys_own_time(client, auth):
    out = ingest(
        client,
        auth,
        [{"role": "user", "content": "We got back from Porto yesterday.",
          "at": "2023-05-08T23:30:00-07:00"},
         {"role": "user", "content": "No dates here."}],
    )  # fmt: skip
    first, second = out["memories"]
    # Late evening of 8 May where it was said: yesterday is 7 May, though it is 9 May in UTC.
    assert first["dates"] == [{"text": "yesterday", "start": "2023-05-07", "end": "2023-05-07"}]
    assert "dates" not in second
    m = data(
        mutate(
            client,
            "memory.add",
            {"userId": "alice", "content": "Her exam is next month",
             "occurredAt": "2024-01-15T09:00:00Z"},
            headers=auth,
        )
    )  # fmt: skip
    assert m["dates"] == [{"text": "next month", "start": "2024-02-01", "end": "2024-02-29"}]
    # A new time moves them; new text finds them again; text without any clears them.
    moved = data(
        mutate(
            client, "memory.update", {"id": m["id"], "occurredAt": "2024-11-02T09:00:00Z"},
            headers=auth,
        )
    )  # fmt: skip
    assert moved["dates"] == [{"text": "next month", "start": "2024-12-01", "end": "2024-12-31"}]
    changed = data(
        mutate(client, "memory.update", {"id": m["id"], "content": "Exam on 3 March"},
               headers=auth)
    )  # fmt: skip
    assert changed["dates"] == [{"text": "3 March", "start": "2024-03-03", "end": "2024-03-03"}]
    cleared = data(
        mutate(client, "memory.update", {"id": m["id"], "content": "No exam"}, headers=auth)
    )
    assert "dates" not in cleared
