"""Memsvc (sync): every method end to end against a real memsvc under gunicorn."""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
import typing as t

import httpx
import pytest
from client_support import BEES
from client_support import BUDGET
from client_support import PETS
from client_support import RECOMMENDED
from client_support import WIRE_DEFAULT
from client_support import ZEBRA
from client_support import Recorder
from memsvc_client import UNSET
from memsvc_client import BadRequest
from memsvc_client import EndUser
from memsvc_client import Explain
from memsvc_client import Memory
from memsvc_client import Memsvc
from memsvc_client import NotFound
from memsvc_client import Unauthorized
from memsvc_server import Server

UTC = datetime.UTC

pytestmark = pytest.mark.e2e


def test_add_returns_a_typed_immutable_memory(memsvc: Memsvc, user: str) -> None:
    before = datetime.datetime.now(UTC) - datetime.timedelta(seconds=5)
    expires = datetime.datetime.now(UTC) + datetime.timedelta(days=2)
    m = memsvc.add(
        user, "Bob trains for the Berlin marathon", metadata={"sport": "run"}, expires_at=expires
    )
    assert isinstance(m, Memory)
    assert len(m.id) == 36 and m.content == "Bob trains for the Berlin marathon"
    assert m.user_id == user and m.metadata == {"sport": "run"}
    assert m.created_at.tzinfo == UTC and before < m.created_at < expires
    assert m.updated_at == m.created_at
    # The wire keeps milliseconds.
    assert m.expires_at is not None and abs(m.expires_at - expires).total_seconds() < 0.001
    assert m.similarity is None and m.matched_by is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "changed"  # type: ignore[misc]
    assert memsvc.get(m.id) == m


def test_get_update_history_delete(memsvc: Memsvc, user: str) -> None:
    m = memsvc.add(user, "Alice drinks green tea", metadata={"topic": "drinks"})
    expires = datetime.datetime(2099, 1, 1, tzinfo=UTC)

    changed = memsvc.update(m.id, content="Alice drinks oolong tea", expires_at=expires)
    assert changed.id == m.id and changed.content == "Alice drinks oolong tea"
    assert changed.metadata == {"topic": "drinks"}  # not given: kept
    assert changed.created_at == m.created_at and changed.updated_at > m.created_at
    assert changed.expires_at == expires

    cleared = memsvc.update(m.id, metadata=None, expires_at=None)  # None: clear
    assert cleared.metadata == {} and cleared.expires_at is None
    assert cleared.content == "Alice drinks oolong tea"
    assert memsvc.update(m.id, metadata={"a": [1, 2]}, content=UNSET).metadata == {"a": [1, 2]}

    history = memsvc.history(m.id)
    assert [v["version"] for v in history] == [1, 2, 3, 4]
    assert [v["event"] for v in history] == ["add", "update", "update", "update"]
    assert history[0]["content"] == "Alice drinks green tea"
    assert history[0]["metadata"] == {"topic": "drinks"}
    assert history[-1]["metadata"] == {"a": [1, 2]}
    assert all(isinstance(v["at"], str) and v["at"].endswith("Z") for v in history)

    assert memsvc.get(m.id).metadata == {"a": [1, 2]}
    assert memsvc.delete(m.id) is None
    with pytest.raises(NotFound) as gone:
        memsvc.get(m.id)
    assert (gone.value.code, gone.value.http_status, gone.value.path) == (
        "NOT_FOUND",
        404,
        "memory.getById",
    )
    with pytest.raises(NotFound) as again:
        memsvc.delete(m.id)
    assert again.value.path == "memory.delete"
    with pytest.raises(NotFound):
        memsvc.history(m.id)


def test_search_ranks_filters_and_sends_mode(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        memsvc.add(user, "Bob is training for the Berlin marathon", metadata={"kind": "sport"})
        memsvc.add(user, "Bob runs ten kilometres every morning", metadata={"kind": "sport"})
        memsvc.add(user, "Bob's favourite pasta is carbonara", metadata={"kind": "food"})

        # Semantic: ranked by similarity alone (hybrid, the default, adds keyword strength).
        found = memsvc.search(user, "Which race is Bob running?", threshold=0.0, mode="semantic")
        assert len(found) == 3
        similarities = [m.similarity for m in found]
        assert all(s is not None and 0 <= s <= 1 for s in similarities)
        assert similarities == sorted(similarities, reverse=True)  # type: ignore[type-var]
        assert found[0].content == "Bob is training for the Berlin marathon"

        assert len(memsvc.search(user, "Which race is Bob running?", threshold=0, limit=1)) == 1
        food = memsvc.search(user, "running", threshold=0.0, filter={"kind": "food"})
        assert [m.content for m in food] == ["Bob's favourite pasta is carbonara"]
        not_food = memsvc.search(user, "x", threshold=0.0, filter={"kind": {"ne": "food"}})
        assert len(not_food) == 2

        # mode is sent as given (what the server does with it is its own business).
        memsvc.search(user, "marathon", threshold=0.0, mode="semantic")
        assert recorder.inputs("memory.search")[-1] == {
            "userId": user,
            "query": "marathon",
            "threshold": 0.0,
            "mode": "semantic",
        }


def test_a_natural_question_finds_a_memory_under_the_wires_default_threshold(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        bees = memsvc.add(user, BEES)
        found = memsvc.search(user, PETS)
        assert found[0].id == bees.id
        # Found with the recommended threshold; the wire's default would miss it.
        assert found[0].similarity is not None
        assert RECOMMENDED <= found[0].similarity < WIRE_DEFAULT
        assert memsvc.search(user, PETS, threshold=WIRE_DEFAULT) == []
    assert recorder.inputs("memory.search") == [
        {"userId": user, "query": PETS, "mode": "hybrid", "threshold": RECOMMENDED},
        {"userId": user, "query": PETS, "mode": "hybrid", "threshold": WIRE_DEFAULT},
    ]


def test_a_keyword_search_without_a_threshold_has_no_floor(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        budget = memsvc.add(user, BUDGET)
        found = memsvc.search(user, ZEBRA, mode="keyword")
        assert [m.id for m in found] == [budget.id]
        assert found[0].similarity is not None and found[0].similarity < RECOMMENDED
        assert found[0].matched_by == ("keyword",)
        # Hybrid, by default, keeps the recommended floor; a floor given is sent.
        assert memsvc.search(user, ZEBRA) == []
        assert memsvc.search(user, ZEBRA, mode="keyword", threshold=0.5) == []
        assert len(memsvc.search(user, ZEBRA, threshold=0.0)) == 1
    assert recorder.inputs("memory.search") == [
        {"userId": user, "query": ZEBRA, "mode": "keyword"},
        {"userId": user, "query": ZEBRA, "mode": "hybrid", "threshold": RECOMMENDED},
        {"userId": user, "query": ZEBRA, "mode": "keyword", "threshold": 0.5},
        {"userId": user, "query": ZEBRA, "mode": "hybrid", "threshold": 0.0},
    ]
    # Asked once for the client's life, and not for the keyword search before it.
    assert recorder.procedures().count("service.info") == 1
    assert recorder.procedures().index("service.info") == 2


def test_the_default_mode_is_hybrid_and_mode_or_default_mode_overrides_it(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        assert memsvc.default_mode == "hybrid"
        memsvc.add(user, BEES)
        (hybrid,) = memsvc.search(user, PETS)
        (semantic,) = memsvc.search(user, PETS, mode="semantic")
        assert hybrid.matched_by == ("keyword", "semantic") and semantic.matched_by is None
    with Memsvc(
        server.url, api_key=api_key, default_mode="semantic", http_client=recorder.client()
    ) as memsvc:
        (found,) = memsvc.search(user, PETS)
        assert found.matched_by is None
        (keyword,) = memsvc.search(user, PETS, mode="keyword")
        assert keyword.matched_by == ("keyword",)
    modes = [i["mode"] for i in recorder.inputs("memory.search")]
    assert modes == ["hybrid", "semantic", "semantic", "keyword"]
    with pytest.raises(ValueError, match="hybrid"):
        Memsvc(server.url, api_key=api_key, default_mode="hybird")  # type: ignore[arg-type]


def test_explain_says_why_each_result_ranked(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        bees = memsvc.add(user, BEES)
        (plain,) = memsvc.search(user, PETS)
        (hybrid,) = memsvc.search(user, PETS, explain=True)
        (semantic,) = memsvc.search(user, PETS, mode="semantic", explain=True)
    assert plain.explain is None and "explain" not in plain.to_dict()
    assert hybrid.id == semantic.id == bees.id
    assert isinstance(hybrid.explain, Explain) and isinstance(semantic.explain, Explain)
    assert hybrid.explain.cosine == hybrid.similarity
    # "Dan" matched: hybrid raises the cosine by the keyword match's strength.
    assert hybrid.explain.keyword is not None and 0 < hybrid.explain.keyword <= 1
    assert hybrid.explain.score > hybrid.explain.cosine
    assert semantic.explain == Explain(
        cosine=semantic.similarity, keyword=None, score=semantic.similarity
    )  # type: ignore[arg-type]
    # Hybrid's parts add up to its score; it ranked by time (the query names none).
    assert hybrid.explain.parts is not None
    assert sum(hybrid.explain.parts.values()) == pytest.approx(hybrid.explain.score)
    assert hybrid.explain.timed and hybrid.explain.time is None
    assert hybrid.to_dict()["explain"] == {
        "cosine": hybrid.explain.cosine,
        "keyword": hybrid.explain.keyword,
        "score": hybrid.explain.score,
        "parts": dict(hybrid.explain.parts),
        "time": None,
    }
    assert [i.get("explain") for i in recorder.inputs("memory.search")] == [None, True, True]


def test_get_all_pages_with_cursor_and_iter_all_follows_them(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    with Memsvc(server.url, api_key=api_key, http_client=recorder.client()) as memsvc:
        for i in range(7):
            memsvc.add(user, f"fact number {i}", metadata={"even": i % 2 == 0})
        everything = memsvc.get_all(user)
        assert [m.content for m in everything] == [f"fact number {i}" for i in reversed(range(7))]

        first = memsvc.get_all(user, limit=3)
        second = memsvc.get_all(user, limit=3, cursor=first[-1].id)
        assert first + second == everything[:6]

        recorder.calls.clear()
        assert list(memsvc.iter_all(user, page_size=3)) == everything
        # Pages of 3, 3 and 1: the short page ends it without asking for an empty one.
        assert recorder.procedures() == ["memory.getAll"] * 3
        assert [i.get("cursor") for i in recorder.inputs("memory.getAll")] == [
            None,
            everything[2].id,
            everything[5].id,
        ]
        assert list(memsvc.iter_all(user, page_size=7)) == everything  # a full last page
        evens = list(memsvc.iter_all(user, page_size=2, filter={"even": True}))
        assert evens == [m for m in everything if m.metadata["even"]]
        assert memsvc.get_all(user, filter={"even": False}, limit=1) == [everything[1]]


def test_created_after_and_before(memsvc: Memsvc, user: str) -> None:
    old = memsvc.add(user, "an older memory")
    time.sleep(0.01)
    new = memsvc.add(user, "a newer memory")
    assert memsvc.get_all(user, created_after=old.created_at) == [new]
    assert memsvc.get_all(user, created_before=new.created_at) == [old]
    hits = memsvc.search(user, "memory", threshold=0.0, created_after=old.created_at)
    assert [m.id for m in hits] == [new.id]
    with pytest.raises(ValueError, match="timezone-aware"):
        memsvc.get_all(user, created_after=datetime.datetime(2020, 1, 1))  # naive


def test_dedupe_returns_the_existing_memory(memsvc: Memsvc, user: str) -> None:
    a = memsvc.add(user, "likes jazz", metadata={"x": 1, "y": 2}, dedupe=True)
    b = memsvc.add(user, "  likes jazz ", metadata={"y": 2, "x": 1}, dedupe=True)
    assert b.id == a.id
    c = memsvc.add(user, "likes jazz", metadata={"x": 1, "y": 2})
    assert c.id != a.id
    assert len(memsvc.get_all(user)) == 2


def test_delete_all_counts_and_spares_other_users(memsvc: Memsvc, user: str) -> None:
    other = user + "-other"
    for i in range(3):
        memsvc.add(user, f"mine {i}")
    kept = memsvc.add(other, "someone else's")
    assert memsvc.delete_all(user) == 3
    assert memsvc.get_all(user) == []
    assert memsvc.delete_all(user) == 0
    assert memsvc.get_all(other) == [kept]


def test_info_describes_the_deployment(memsvc: Memsvc) -> None:
    info = memsvc.info()
    assert info["embedder"]["model"] == "local:all-MiniLM-L6-v2"
    assert info["embedder"]["dimensions"] == 384
    assert info["embedder"]["recommendedThreshold"] == pytest.approx(0.35)
    assert info["defaults"] == {"threshold": 0.7, "limit": 10}
    assert info["limits"] == {"perMinute": 0, "concurrent": 10}


def test_errors_are_typed_with_code_status_path_and_message(
    server: Server, memsvc: Memsvc, user: str
) -> None:
    with pytest.raises(BadRequest) as bad:
        memsvc.add(user, "   ")
    e = bad.value
    assert (e.code, e.http_status, e.path) == ("BAD_REQUEST", 400, "memory.add")
    assert "content" in e.message and str(e).startswith("BAD_REQUEST 400 on memory.add: ")

    with pytest.raises(BadRequest) as bad_id:
        memsvc.get("not-a-uuid")
    assert bad_id.value.path == "memory.getById" and "UUID" in bad_id.value.message

    with pytest.raises(BadRequest, match="limit"):
        memsvc.search(user, "q", limit=1000)

    with (
        Memsvc(server.url, api_key="sk_memsvc_" + "0" * 64) as stranger,
        pytest.raises(Unauthorized) as unauthorized,
    ):
        stranger.get_all(user)
    assert (unauthorized.value.code, unauthorized.value.http_status) == ("UNAUTHORIZED", 401)
    assert unauthorized.value.path == "memory.getAll"


def test_a_search_repeating_a_memory_has_similarity_1_as_a_float(
    memsvc: Memsvc, server: Server, api_key: str, user: str
) -> None:
    text = "Grace waters the ferns every Sunday"
    memsvc.add(user, text)
    query = json.dumps({"userId": user, "query": text, "mode": "semantic", "threshold": 0.5})
    raw = httpx.get(
        server.trpc + "/memory.search",
        params={"input": query},
        headers={"x-api-key": api_key},
        timeout=30,
    ).json()["result"]["data"]
    assert raw[0]["similarity"] == 1 and type(raw[0]["similarity"]) is int  # the wire's `1`
    (found,) = memsvc.search(user, text, mode="semantic", threshold=0.5, explain=True)
    assert found.similarity == 1.0 and type(found.similarity) is float
    assert found.explain is not None and type(found.explain.cosine) is float


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_a_wrong_key_fails_the_search_not_service_info(
    server: Server, user: str, recorder: Recorder, mode: t.Any
) -> None:
    # A search without a threshold first asks service.info for the recommended
    # one (not in keyword mode): its 401 is the search's error all the same.
    wrong = "sk_memsvc_" + "0" * 64
    with (
        Memsvc(server.url, api_key=wrong, http_client=recorder.client()) as stranger,
        pytest.raises(Unauthorized) as refused,
    ):
        stranger.search(user, "anything", mode=mode)
    e = refused.value
    assert (e.code, e.http_status, e.path) == ("UNAUTHORIZED", 401, "memory.search")
    assert str(e).startswith("UNAUTHORIZED 401 on memory.search: ") and wrong not in str(e)
    asked = ["memory.search"] if mode == "keyword" else ["service.info"]
    assert recorder.procedures() == asked


def test_another_tenants_memory_is_not_found(server: Server, memsvc: Memsvc, user: str) -> None:
    mine = memsvc.add(user, "tenant acme's memory")
    with Memsvc(server.url, api_key=server.create_key("globex", "other")) as other:
        with pytest.raises(NotFound):
            other.get(mine.id)
        with pytest.raises(NotFound):
            other.update(mine.id, content="hijacked")
        assert other.get_all(user) == []
    assert memsvc.get(mine.id).content == "tenant acme's memory"


def test_users_pages_by_id_with_prefix_and_iter_users_follows_them(server: Server) -> None:
    with Memsvc(server.url, api_key=server.create_key("users-sync", "t")) as memsvc:
        for name in ["team/b", "team/a", "solo", "team/c"]:
            memsvc.add(name, f"a note of {name}")
        last = memsvc.add("team/a", "another note")
        first = memsvc.users(limit=2)
        assert [u.user_id for u in first] == ["solo", "team/a"]
        assert first[1] == EndUser("team/a", 2, last.updated_at)
        with pytest.raises(dataclasses.FrozenInstanceError):
            first[1].memories = 3  # type: ignore[misc]
        assert [u.user_id for u in memsvc.users(cursor=first[-1].user_id)] == ["team/b", "team/c"]
        assert [u.user_id for u in memsvc.users(prefix="team/", limit=1)] == ["team/a"]
        assert [u.user_id for u in memsvc.iter_users(page_size=1, prefix="team/")] == [
            "team/a",
            "team/b",
            "team/c",
        ]
        assert first[0].to_dict()["userId"] == "solo"
        with pytest.raises(BadRequest):
            memsvc.users(limit=0)
    # Another tenant's users are not listed.
    with Memsvc(server.url, api_key=server.create_key("users-other", "t")) as other:
        assert other.users() == [] and list(other.iter_users()) == []


def test_user_id_keeps_calls_by_id_to_that_end_user(memsvc: Memsvc, user: str) -> None:
    theirs = memsvc.add(user + "-other", "another end user's memory")
    for attempt in (
        lambda: memsvc.get(theirs.id, user_id=user),
        lambda: memsvc.history(theirs.id, user_id=user),
        lambda: memsvc.update(theirs.id, content="overwritten", user_id=user),
        lambda: memsvc.delete(theirs.id, user_id=user),
    ):
        with pytest.raises(NotFound):
            attempt()
    assert memsvc.get(theirs.id) == theirs
    mine = memsvc.add(user, "my memory")
    assert memsvc.get(mine.id, user_id=user) == mine
    assert memsvc.update(mine.id, content="my memory, edited", user_id=user).content == (
        "my memory, edited"
    )
    assert len(memsvc.history(mine.id, user_id=user)) == 2
    memsvc.delete(mine.id, user_id=user)
    with pytest.raises(NotFound):
        memsvc.get(mine.id)


def test_the_key_is_read_from_the_environment_and_never_shown(
    server: Server, api_key: str, user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="MEMSVC_API_KEY"):
        Memsvc(server.url)
    monkeypatch.setenv("MEMSVC_API_KEY", api_key)
    with Memsvc(server.url + "/trpc/") as memsvc:  # the /trpc base URL works too
        assert memsvc.get_all(user) == []
        assert api_key not in repr(memsvc)
        with pytest.raises(NotFound) as e:
            memsvc.get("00000000-0000-4000-8000-000000000000")
        assert api_key not in str(e.value) and api_key not in repr(e.value)
    with pytest.raises(ValueError, match="http"):
        Memsvc("ftp://example.com", api_key=api_key)


def test_the_answers_match_what_the_server_sent(
    memsvc: Memsvc, server: Server, api_key: str, user: str
) -> None:
    m = memsvc.add(user, "round trip", metadata={"n": 1.5, "nested": {"a": None}})
    raw = httpx.get(
        server.trpc + "/memory.getById",
        params={"input": f'{{"id":"{m.id}"}}'},
        headers={"x-api-key": api_key},
        timeout=30,
    ).json()["result"]["data"]
    as_dict = memsvc.get(m.id).to_dict()
    assert as_dict == {k: v for k, v in raw.items() if k != "idpUserId"}
