"""AsyncMemsvc: every method end to end, and concurrent use, against a real memsvc."""

from __future__ import annotations

import asyncio
import datetime
import typing as t

import pytest
from client_support import BEES
from client_support import BUDGET
from client_support import PETS
from client_support import RECOMMENDED
from client_support import WIRE_DEFAULT
from client_support import ZEBRA
from client_support import Recorder
from memsvc_client import AsyncMemsvc
from memsvc_client import BadRequest
from memsvc_client import Memory
from memsvc_client import Memsvc
from memsvc_client import NotFound
from memsvc_client import Unauthorized
from memsvc_server import Server

UTC = datetime.UTC

pytestmark = pytest.mark.e2e


def run(coroutine: t.Coroutine[t.Any, t.Any, t.Any]) -> t.Any:
    return asyncio.run(coroutine)


def test_every_method_end_to_end(server: Server, api_key: str, user: str) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=api_key) as memsvc:
            expires = datetime.datetime.now(UTC) + datetime.timedelta(hours=1)
            m = await memsvc.add(
                user, "Carol plays the cello", metadata={"kind": "music"}, expires_at=expires
            )
            assert isinstance(m, Memory) and m.user_id == user and m.expires_at is not None
            assert await memsvc.add(user, "Carol plays the cello", metadata={"kind": "music"},
                                    dedupe=True) == m  # fmt: skip
            other = await memsvc.add(user, "Carol lives in Lisbon", metadata={"kind": "place"})

            assert await memsvc.get(m.id) == m
            found = await memsvc.search(user, "Which instrument?", threshold=0.0, limit=1)
            assert [f.id for f in found] == [m.id] and found[0].similarity is not None
            places = await memsvc.search(user, "x", threshold=0.0, filter={"kind": "place"})
            assert [f.id for f in places] == [other.id]
            assert await memsvc.get_all(user) == [other, m]
            assert await memsvc.get_all(user, limit=1, cursor=other.id) == [m]

            changed = await memsvc.update(m.id, content="Carol plays the viola", metadata=None)
            assert changed.content == "Carol plays the viola" and changed.metadata == {}
            assert [v["event"] for v in await memsvc.history(m.id)] == ["add", "update"]

            info = await memsvc.info()
            assert info["embedder"]["dimensions"] == 384

            await memsvc.delete(m.id)
            with pytest.raises(NotFound) as e:
                await memsvc.get(m.id)
            assert (e.value.code, e.value.http_status, e.value.path) == (
                "NOT_FOUND",
                404,
                "memory.getById",
            )
            with pytest.raises(BadRequest) as bad:
                await memsvc.add(user, "")
            assert (bad.value.code, bad.value.http_status, bad.value.path) == (
                "BAD_REQUEST",
                400,
                "memory.add",
            )
            assert await memsvc.delete_all(user) == 1
            assert await memsvc.get_all(user) == []

    run(scenario())


def test_users_and_iter_users(server: Server) -> None:
    async def scenario() -> None:
        key = server.create_key("users-async", "t")
        async with AsyncMemsvc(server.url, api_key=key) as memsvc:
            for name in ["c", "a", "b"]:
                await memsvc.add(name, "note")
            page = await memsvc.users(limit=2)
            assert [(u.user_id, u.memories) for u in page] == [("a", 1), ("b", 1)]
            assert [u.user_id for u in await memsvc.users(cursor="b")] == ["c"]
            assert [u.user_id async for u in memsvc.iter_users(page_size=2)] == ["a", "b", "c"]
            assert [u.user_id for u in await memsvc.users(prefix="b")] == ["b"]

    run(scenario())


def test_twenty_concurrent_adds_all_land_once(server: Server, api_key: str, user: str) -> None:
    contents = [f"concurrent memory {i}" for i in range(20)]

    async def scenario() -> list[Memory]:
        # The key may run 10 calls at once: beyond that the server answers 429
        # with Retry-After 1, and the client waits and sends those again.
        async with AsyncMemsvc(server.url, api_key=api_key) as memsvc:
            return list(await asyncio.gather(*(memsvc.add(user, c) for c in contents)))

    added = run(scenario())
    assert sorted(m.content for m in added) == sorted(contents)
    assert len({m.id for m in added}) == 20
    with Memsvc(server.url, api_key=api_key) as memsvc:
        stored = memsvc.get_all(user)
    assert sorted(m.content for m in stored) == sorted(contents)  # none lost, none twice
    assert {m.id for m in stored} == {m.id for m in added}


def test_iter_all_across_pages_equals_get_all_order(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    async def scenario() -> tuple[list[Memory], list[Memory]]:
        async with (
            recorder.async_client() as http,
            AsyncMemsvc(server.url, api_key=api_key, http_client=http) as memsvc,
        ):
            for i in range(10):
                await memsvc.add(user, f"page fact {i}")
            everything = await memsvc.get_all(user)
            recorder.calls.clear()
            return everything, [m async for m in memsvc.iter_all(user, page_size=4)]

    everything, iterated = run(scenario())
    assert len(everything) == 10 and iterated == everything
    assert recorder.procedures() == ["memory.getAll"] * 3  # 4 + 4 + 2


def test_a_wrong_key_fails_the_search_not_service_info(server: Server, user: str) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key="sk_memsvc_" + "0" * 64) as stranger:
            with pytest.raises(Unauthorized) as refused:
                await stranger.search(user, "anything")
            e = refused.value
            assert (e.code, e.http_status, e.path) == ("UNAUTHORIZED", 401, "memory.search")
            assert str(e).startswith("UNAUTHORIZED 401 on memory.search: ")
            # Not remembered as "no recommendation": the next search asks again.
            with pytest.raises(Unauthorized, match="on memory.search"):
                await stranger.search(user, "anything")

    run(scenario())


def test_threshold_none_asks_service_info_once(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    async def scenario() -> None:
        async with (
            recorder.async_client() as http,
            AsyncMemsvc(server.url, api_key=api_key, http_client=http) as memsvc,
        ):
            await memsvc.add(user, "Dan keeps bees")
            await asyncio.gather(*(memsvc.search(user, f"insects {i}") for i in range(5)))
            await memsvc.search(user, "insects", threshold=0.5)

    run(scenario())
    assert recorder.procedures().count("service.info") == 1
    thresholds = [i["threshold"] for i in recorder.inputs("memory.search")]
    assert thresholds == [pytest.approx(0.35)] * 5 + [0.5]


def test_search_defaults_hybrid_recommended_threshold_no_keyword_floor_and_explain(
    server: Server, api_key: str, user: str, recorder: Recorder
) -> None:
    async def scenario() -> dict[str, list[Memory]]:
        async with (
            recorder.async_client() as http,
            AsyncMemsvc(server.url, api_key=api_key, http_client=http) as memsvc,
        ):
            await memsvc.add(user, BEES)
            await memsvc.add(user, BUDGET)
            searches = {
                "natural": memsvc.search(user, PETS),
                "strict": memsvc.search(user, PETS, threshold=WIRE_DEFAULT),
                "keyword": memsvc.search(user, ZEBRA, mode="keyword"),
                "hybrid": memsvc.search(user, ZEBRA),
                "explained": memsvc.search(user, PETS, mode="semantic", explain=True),
            }
            found = dict(zip(searches, await asyncio.gather(*searches.values()), strict=True))
        async with AsyncMemsvc(server.url, api_key=api_key, default_mode="keyword") as keyword:
            found["keyword_by_default"] = await keyword.search(user, ZEBRA)
        return found

    found = run(scenario())
    (natural,) = found["natural"]
    assert natural.content == BEES and natural.matched_by == ("keyword", "semantic")
    assert natural.similarity is not None and RECOMMENDED <= natural.similarity < WIRE_DEFAULT
    assert found["strict"] == []
    assert [m.content for m in found["keyword"]] == [BUDGET]
    assert found["keyword"][0].similarity < RECOMMENDED  # type: ignore[operator]
    assert found["hybrid"] == []
    assert found["keyword_by_default"] == found["keyword"]
    (explained,) = found["explained"]
    assert explained.matched_by is None and explained.explain is not None
    assert explained.explain.cosine == explained.similarity and explained.explain.keyword is None
    sent = sorted(
        (
            (i["query"], i["mode"], i.get("threshold"), i.get("explain"))
            for i in recorder.inputs("memory.search")
        ),
        key=repr,
    )
    assert sent == sorted(
        [
            (PETS, "hybrid", RECOMMENDED, None),
            (PETS, "hybrid", WIRE_DEFAULT, None),
            (ZEBRA, "keyword", None, None),
            (ZEBRA, "hybrid", RECOMMENDED, None),
            (PETS, "semantic", RECOMMENDED, True),
        ],
        key=repr,
    )
    assert recorder.procedures().count("service.info") == 1
