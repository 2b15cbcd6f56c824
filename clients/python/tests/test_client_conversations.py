"""Conversations through the client (sync and async): ingest, sessions, session, occurred_at."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from memsvc_client import AsyncMemsvc
from memsvc_client import Ingested
from memsvc_client import Memsvc
from memsvc_client import NotFound
from memsvc_client import Session
from memsvc_server import Server

pytestmark = pytest.mark.e2e

CEST = datetime.timezone(datetime.timedelta(hours=2))
DINNER = [
    {"role": "user", "name": "Alice", "content": "I cooked a mushroom risotto yesterday.",
     "at": datetime.datetime(2023, 5, 8, 19, 30, tzinfo=CEST), "id": "m1"},
    {"role": "assistant", "content": "Lovely! Did you use arborio rice?", "id": "m2"},
    {"role": "user", "name": "Alice", "content": "Carnaroli, it holds its shape better.",
     "at": "2023-05-08T19:32:00+02:00", "id": "m3"},
]  # fmt: skip


def test_ingest_then_read_the_session_back(memsvc: Memsvc, user: str) -> None:
    out = memsvc.ingest(user, DINNER, session_id="dinner", metadata={"app": "chat"})
    assert isinstance(out, Ingested) and out.session_id == "dinner" and out.duplicates == 0
    first = out.memories[0]
    assert first.kind == "message" and first.role == "user" and first.speaker == "Alice"
    assert first.position == 0 and first.message_id == "m1" and first.session_id == "dinner"
    assert first.occurred_at == datetime.datetime(2023, 5, 8, 17, 30, tzinfo=datetime.UTC)
    assert first.time == first.occurred_at and first.metadata == {"app": "chat"}
    assert out.memories[1].speaker is None and out.memories[1].role == "assistant"
    # Sent again (a retry after a lost answer): nothing stored twice.
    again = memsvc.ingest(user, DINNER, session_id="dinner")
    assert again.duplicates == 3 and again.memories == out.memories
    assert memsvc.session(user, "dinner") == list(out.memories)
    assert [m.position for m in memsvc.iter_session(user, "dinner", page_size=2)] == [0, 1, 2]
    (listed,) = memsvc.sessions(user)
    assert isinstance(listed, Session)
    assert (listed.session_id, listed.messages) == ("dinner", 3)
    assert listed.last_at == datetime.datetime(2023, 5, 8, 17, 32, tzinfo=datetime.UTC)
    with pytest.raises(NotFound):
        memsvc.session(user, "no-such-session")


def test_an_ingest_whose_messages_all_have_ids_may_be_sent_again(memsvc: Memsvc) -> None:
    from memsvc_client import _core

    assert _core.ingest_call("u", DINNER, None, None, None).resend_safe
    assert not _core.ingest_call(
        "u", [{"role": "user", "content": "x"}], None, None, None
    ).resend_safe


def test_iter_sessions_pages_through_every_session(memsvc: Memsvc, user: str) -> None:
    for day in range(1, 6):
        at = datetime.datetime(2024, 3, day, tzinfo=datetime.UTC)
        memsvc.ingest(
            user, [{"role": "user", "content": f"day {day}", "at": at}], session_id=f"s{day}"
        )
    ids = [s.session_id for s in memsvc.iter_sessions(user, page_size=2)]
    assert ids == ["s5", "s4", "s3", "s2", "s1"]


def test_occurred_at_and_kinds(memsvc: Memsvc, user: str) -> None:
    when = datetime.datetime(2021, 6, 1, 9, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    note = memsvc.add(user, "Moved to Lisbon", occurred_at=when)
    assert note.occurred_at == when and note.kind is None
    memsvc.ingest(user, DINNER)
    assert [m.id for m in memsvc.get_all(user, kinds=["memory"])] == [note.id]
    assert len(memsvc.get_all(user, kinds=["message"])) == 3
    before = datetime.datetime(2022, 1, 1, tzinfo=datetime.UTC)
    assert [m.id for m in memsvc.get_all(user, occurred_before=before)] == [note.id]
    cleared = memsvc.update(note.id, occurred_at=None)
    assert cleared.occurred_at is None and cleared.time == cleared.created_at


def test_the_async_client_ingests_too(server: Server, api_key: str, user: str) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=api_key) as memsvc:
            out = await memsvc.ingest(user, DINNER, session_id="s")
            assert [m.position for m in out.memories] == [0, 1, 2]
            assert [s.session_id async for s in memsvc.iter_sessions(user)] == ["s"]
            assert [m.content async for m in memsvc.iter_session(user, "s")] == [
                m["content"] for m in DINNER
            ]

    asyncio.run(scenario())


def test_search_ranks_by_the_time_the_query_names_and_explains_it(
    memsvc: Memsvc, user: str
) -> None:
    for content, day in [("I cooked a lentil soup", 1), ("I cooked a lentil soup again", 13)]:
        memsvc.add(user, content, occurred_at=datetime.datetime(2023, 5, day, 19, tzinfo=CEST))
    now = datetime.datetime(2023, 5, 18, 12, tzinfo=CEST)
    found = memsvc.search(
        user, "What did I cook last weekend?", mode="hybrid", threshold=0, explain=True, now=now
    )
    assert found[0].content == "I cooked a lentil soup again"
    explain = found[0].explain
    assert explain is not None and explain.parts is not None and explain.parts["time"] > 0
    assert explain.time == {"text": "last weekend", "start": "2023-05-13", "end": "2023-05-14"}
    assert explain.to_dict()["time"] == explain.time
    off = memsvc.search(user, "What did I cook last weekend?", mode="hybrid", threshold=0,
                        explain=True, now=now, time="off")  # fmt: skip
    assert off[0].explain is not None and not off[0].explain.timed
    assert all("time" not in (m.explain.parts or {}) for m in off if m.explain)
