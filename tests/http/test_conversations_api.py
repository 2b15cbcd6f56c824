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


# -- search: kinds, time, conversation signals ------------------------------------------


def _search(client, auth, query_text, user="alice", **extra):
    body = {"userId": user, "query": query_text, "threshold": 0, **extra}
    return data(query(client, "memory.search", body, headers=auth))


@pytest.mark.parametrize("mode", ["semantic", "keyword", "hybrid"])
def test_search_takes_kinds_and_time_bounds_in_every_mode(client, auth, mode):
    plain = data(
        mutate(
            client,
            "memory.add",
            {"userId": "alice", "content": "risotto notes", "occurredAt": "2020-01-01T00:00:00Z"},
            headers=auth,
        )
    )
    messages = ingest(client, auth, DINNER)["memories"]

    def found(**extra):
        return {r["id"] for r in _search(client, auth, "risotto", mode=mode, **extra)}

    everything = found()
    assert plain["id"] in everything and messages[0]["id"] in everything
    assert found(kinds=["memory"]) == {plain["id"]}
    assert plain["id"] not in found(kinds=["message"])
    assert found(kinds=["fact"]) == set()
    assert found(occurredBefore="2021-01-01T00:00:00Z") == {plain["id"]}
    assert plain["id"] not in found(occurredAfter="2021-01-01T00:00:00Z")
    # Twice: the second search reads the user's cached snapshot, the first the store.
    assert found(kinds=["memory"]) == {plain["id"]}


def test_hybrid_ranks_what_happened_in_the_time_the_query_names_higher(client, auth):
    for content, at in [
        ("I cooked a lentil soup", "2023-05-01T19:00:00Z"),
        ("I cooked a lentil soup again", "2023-05-13T19:00:00Z"),  # a Saturday
        ("I cooked a lentil soup with lemon", "2023-05-17T19:00:00Z"),
    ]:
        data(mutate(client, "memory.add", {"userId": "alice", "content": content,
                                           "occurredAt": at}, headers=auth))  # fmt: skip
    now = "2023-05-18T12:00:00+00:00"
    asked = "What did I cook last weekend?"
    found = _search(client, auth, asked, mode="hybrid", now=now, explain=True)
    assert found[0]["content"] == "I cooked a lentil soup again"
    assert found[0]["explain"]["time"] == {
        "text": "last weekend", "start": "2023-05-13", "end": "2023-05-14"
    }  # fmt: skip
    assert found[0]["explain"]["parts"]["time"] > 0
    assert "time" not in found[1]["explain"]["parts"]
    parts = found[0]["explain"]["parts"]
    assert found[0]["explain"]["score"] == pytest.approx(sum(parts.values()))
    off = _search(client, auth, asked, mode="hybrid", now=now, explain=True, time="off")
    assert "time" not in off[0]["explain"]
    assert all("time" not in r["explain"]["parts"] for r in off)
    # Semantic mode ranks by time only when asked to.
    semantic = _search(client, auth, asked, now=now, explain=True)
    assert "time" not in semantic[0]["explain"]
    timed = _search(client, auth, asked, now=now, explain=True, time="on")
    assert timed[0]["content"] == "I cooked a lentil soup again"
    assert timed[0]["explain"]["time"]["start"] == "2023-05-13"
    nothing = _search(client, auth, "lentil soup", mode="hybrid", now=now, explain=True)
    assert nothing[0]["explain"]["time"] is None


def test_search_time_inputs_are_checked(client, auth):
    for body, message in [
        ({"time": "maybe"}, "time: must be one of on, off"),
        ({"now": "yesterday"}, "now:"),
    ]:
        resp = query(client, "memory.search", {"userId": "a", "query": "x", **body},
                     headers=auth)  # fmt: skip
        assert message in assert_error(resp, 400, "BAD_REQUEST", "memory.search")["message"]


def test_hybrid_explains_the_conversation_parts_of_a_message(client, auth):
    ingest(
        client,
        auth,
        [
            {
                "role": "user",
                "name": "Maya",
                "content": "Do you know when the pottery class starts?",
            },
            {"role": "user", "name": "Jon", "content": "Next Thursday at seven."},
            {"role": "user", "name": "Maya", "content": "Great, I'll bring the clay."},
        ],
        sessionId="pottery",
    )
    found = _search(client, auth, "When does Maya's pottery class start?", mode="hybrid",
                    explain=True)  # fmt: skip
    by_content = {r["content"]: r["explain"]["parts"] for r in found}
    answer = by_content["Next Thursday at seven."]
    # Its own words hold nothing of the question; its neighbours and session do.
    assert answer["neighbours"] > 0 and answer["session"] > 0
    assert answer["dates"] > 0  # a "when" question, and it holds a date
    asked = by_content["Do you know when the pottery class starts?"]
    assert asked["speaker"] > 0 and "cosineWithoutNames" in asked


def test_hybrid_puts_the_newer_of_two_statements_on_one_subject_first(client, auth):
    ingest(client, auth, [{"role": "user", "content": "My favourite colour is blue.",
                           "at": "2023-01-05T10:00:00Z"}], sessionId="a")  # fmt: skip
    ingest(client, auth, [{"role": "user", "content": "My favourite colour is green now.",
                           "at": "2023-06-05T10:00:00Z"}], sessionId="b")  # fmt: skip
    found = _search(client, auth, "What is my favourite colour?", mode="hybrid", explain=True)
    assert found[0]["content"] == "My favourite colour is green now."
    assert found[1]["content"] == "My favourite colour is blue."


def test_a_question_about_now_gives_later_messages_a_recency_part(client, auth):
    for session, content, at in [
        ("a", "I work at the bakery on Mill Street.", "2023-01-05T10:00:00Z"),
        ("b", "Work is busy, lots of weddings this month.", "2023-04-05T10:00:00Z"),
        ("c", "I started at the library on the square.", "2023-09-05T10:00:00Z"),
    ]:
        ingest(client, auth, [{"role": "user", "content": content, "at": at}],
               sessionId=session)  # fmt: skip
    data(mutate(client, "memory.add", {"userId": "alice", "content": "I work from home",
                                       "occurredAt": "2024-01-01T00:00:00Z"},
                headers=auth))  # fmt: skip

    def parts(asked):
        found = _search(client, auth, asked, mode="hybrid", explain=True)
        return {r["content"]: r["explain"]["parts"] for r in found}

    now = parts("Where do I work now?")
    # The latest message gains the whole weight, the earliest none, one between a share.
    assert now["I started at the library on the square."]["recency"] == pytest.approx(0.3)
    assert "recency" not in now["I work at the bakery on Mill Street."]
    between = now["Work is busy, lots of weddings this month."]["recency"]
    assert 0 < between < 0.3
    # An ordinary memory is never ranked by when it was written, however recent.
    assert "recency" not in now["I work from home"]
    # A question that does not ask what holds now gives no one a recency part.
    assert all("recency" not in p for p in parts("Where did I work?").values())


def test_context_steps_over_deleted_messages(client, auth):
    talk = [{"role": "user", "content": f"line {i} about the weather"} for i in range(7)]
    talk[3] = {"role": "user", "content": "My sister Inês lives in Coimbra."}
    out = ingest(client, auth, talk, sessionId="s")["memories"]
    for gone in (out[2], out[5]):
        data(mutate(client, "memory.delete", {"id": gone["id"]}, headers=auth))
    found = _search(client, auth, "Where does Inês live?", limit=1, context=2)
    assert found[0]["content"].startswith("My sister")
    assert [m["position"] for m in found[0]["context"]["before"]] == [0, 1]
    assert [m["position"] for m in found[0]["context"]["after"]] == [4, 6]
