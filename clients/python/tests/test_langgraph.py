"""memsvc_client.langgraph on LangGraph itself (and LangMem on it), against a real memsvc server."""

from __future__ import annotations

import asyncio
import datetime
import json
import typing as t
import warnings

import pytest
from client_support import BEES
from client_support import PETS
from langgraph.graph import END
from langgraph.graph import START
from langgraph.graph import StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.store.base import GetOp
from langgraph.store.base import InvalidNamespaceError
from langgraph.store.base import PutOp
from langgraph.store.base import SearchItem
from langgraph.warnings import LangGraphDeprecatedSinceV10
from memsvc_client import AsyncMemsvc
from memsvc_client import Memsvc
from memsvc_client.langgraph import MemsvcStore
from memsvc_server import Server
from typing_extensions import TypedDict

with warnings.catch_warnings():
    # trustcall (LangMem's extraction, not used here) imports Send from where
    # LangGraph kept it before 1.0.
    warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10)
    from langmem import create_manage_memory_tool
    from langmem import create_search_memory_tool

pytestmark = pytest.mark.e2e


@pytest.fixture
def store(memsvc: Memsvc) -> MemsvcStore:
    """A store embedding the values' "text" field."""
    return MemsvcStore(memsvc, fields=["text"])


def test_an_item_is_a_memory_of_the_namespaces_end_user(memsvc: Memsvc, user: str) -> None:
    store = MemsvcStore(memsvc)
    assert isinstance(store, BaseStore)
    namespace = ("memories", user)
    value = {"text": BEES, "tags": ["garden", "bees"], "n": 2, "nested": {"ok": True}}
    store.put(namespace, "hobby", value)

    item = store.get(namespace, "hobby")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (namespace, "hobby", value)
    assert item.created_at.tzinfo is not None and item.created_at == item.updated_at
    # In memsvc: one memory of the end user "memories.<user>", the value in its metadata.
    (memory,) = memsvc.get_all(f"memories.{user}")
    assert memory.metadata == {"langgraph": {"key": "hobby"}, "value": value}
    assert memory.content == json.dumps(value, sort_keys=True)  # fields ["$"]: the whole value

    # Put again: the same memory changed, not a second one.
    store.put(namespace, "hobby", {"text": "Dan keeps goats"})
    again = store.get(namespace, "hobby")
    assert again is not None and again.value == {"text": "Dan keeps goats"}
    assert again.created_at == item.created_at and again.updated_at > item.updated_at
    assert [m.id for m in memsvc.get_all(f"memories.{user}")] == [memory.id]

    assert store.get(namespace, "nothing") is None
    assert store.get(("elsewhere", user), "hobby") is None
    store.delete(namespace, "hobby")
    assert store.get(namespace, "hobby") is None
    assert memsvc.get_all(f"memories.{user}") == []
    store.delete(namespace, "hobby")  # deleting what is gone is no error


def test_a_search_with_a_query_ranks_by_memsvcs_search(
    store: MemsvcStore, memsvc: Memsvc, user: str
) -> None:
    namespace = (user, "facts")
    store.put(namespace, "bees", {"text": BEES, "kind": "hobby"})
    store.put(namespace, "budget", {"text": "The budget review moved to Thursday", "kind": "work"})
    store.put(namespace, "secret", {"text": BEES, "kind": "hobby"}, index=False)

    found = store.search(namespace, query=PETS)
    assert [i.key for i in found] == ["bees"]  # the recommended floor; unindexed left out
    (bees,) = found
    assert isinstance(bees, SearchItem) and bees.value == {"text": BEES, "kind": "hobby"}
    assert bees.score is not None and 0.35 < bees.score
    (memory,) = memsvc.get_all(f"{user}.facts", filter={"langgraph.key": "bees"})
    assert memory.content == BEES  # fields=["text"]: the text alone is embedded

    everything = MemsvcStore(memsvc, fields=["text"], threshold=0).search(namespace, query=PETS)
    assert [i.key for i in everything] == ["bees", "budget"]
    assert everything[0].score is not None and everything[1].score is not None
    assert everything[0].score > everything[1].score
    # Without a query: every item, newest first, the unindexed one too, no score.
    listed = store.search(namespace)
    assert [i.key for i in listed] == ["secret", "budget", "bees"]
    assert {i.score for i in listed} == {None}
    assert [i.key for i in store.search(namespace, limit=1, offset=1)] == ["budget"]


def test_filters_are_memsvcs_on_the_value(memsvc: Memsvc, user: str) -> None:
    store = MemsvcStore(memsvc, threshold=0)
    namespace = ("notes", user)
    store.put(namespace, "a", {"kind": "note", "score": 1, "author": {"name": "Ann"}})
    store.put(namespace, "b", {"kind": "note", "score": 5, "author": {"name": "Bo"}})
    store.put(namespace, "c", {"kind": "todo", "score": 3, "tags": ["x", "y"]})

    def keys(**filter: t.Any) -> list[str]:
        return sorted(i.key for i in store.search(namespace, filter=filter))

    assert keys(kind="note") == ["a", "b"]
    assert keys(score={"$gte": 3}) == ["b", "c"]
    assert keys(score={"$lt": 3}) == ["a"]
    assert keys(kind={"$ne": "note"}) == ["c"]
    assert keys(author={"name": "Bo"}) == ["b"]  # nested, as LangGraph compares
    assert keys(tags=["x", "y"]) == ["c"] and keys(tags=["y", "x"]) == []
    assert keys(kind="note", score={"$gt": 1}) == ["b"]
    # With a query too: the filter applies before ranking.
    assert [i.key for i in store.search(namespace, query="todo", filter={"kind": "todo"})] == ["c"]
    # What memsvc cannot express is refused before anything is sent.
    with pytest.raises(ValueError, match="one operator per key"):
        keys(score={"$gte": 1, "$lte": 4})
    with pytest.raises(ValueError, match="cannot address a key holding '.'"):
        keys(**{"a.b": 1})
    with pytest.raises(ValueError, match=r"Unsupported operator: \$in"):
        keys(kind={"$in": ["note"]})


def test_searches_and_listings_span_the_namespaces_under_a_prefix(
    store: MemsvcStore, user: str
) -> None:
    for who in ("ann", "bo"):
        store.put((user, "users", who), "pet", {"text": f"{who} keeps bees"})
        store.put((user, "users", who, "drafts"), "d", {"text": "draft"})
    store.put((f"{user}x", "users", "ann"), "pet", {"text": "not under the prefix"})

    listed = store.search((user, "users"), limit=10)
    assert sorted(i.namespace for i in listed) == [
        (user, "users", "ann"),
        (user, "users", "ann", "drafts"),
        (user, "users", "bo"),
        (user, "users", "bo", "drafts"),
    ]
    found = store.search((user,), query="Who keeps bees?", limit=2)
    assert sorted(i.value["text"] for i in found) == ["ann keeps bees", "bo keeps bees"]

    assert store.list_namespaces(prefix=(user,)) == [
        (user, "users", "ann"),
        (user, "users", "ann", "drafts"),
        (user, "users", "bo"),
        (user, "users", "bo", "drafts"),
    ]
    assert store.list_namespaces(prefix=(user,), max_depth=2) == [(user, "users")]
    assert store.list_namespaces(prefix=(user, "*", "bo")) == [
        (user, "users", "bo"),
        (user, "users", "bo", "drafts"),
    ]
    assert store.list_namespaces(prefix=(user,), suffix=("drafts",)) == [
        (user, "users", "ann", "drafts"),
        (user, "users", "bo", "drafts"),
    ]
    assert store.list_namespaces(prefix=(user,), limit=1, offset=2) == [(user, "users", "bo")]


def test_a_batch_runs_in_order_and_checks_every_op_first(
    store: MemsvcStore, memsvc: Memsvc, user: str
) -> None:
    namespace = (user,)
    results = store.batch(
        [
            PutOp(namespace, "k", {"v": 1}),
            GetOp(namespace, "k"),
            PutOp(namespace, "k", {"v": 2}),
            GetOp(namespace, "k"),
            PutOp(namespace, "k", None),
            GetOp(namespace, "k"),
        ]
    )
    assert [r.value if r is not None else None for r in results[1::2]] == [{"v": 1}, {"v": 2}, None]
    assert results[0::2] == [None, None, None]
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"v": 3}), PutOp(("a.b",), "k", {"v": 3})])
    assert memsvc.get_all(user) == []  # nothing of a refused batch was done
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"v": 1})


def test_ttl_is_memsvcs_expiry_from_the_put(store: MemsvcStore, memsvc: Memsvc, user: str) -> None:
    assert store.supports_ttl
    before = datetime.datetime.now(datetime.UTC)
    store.put((user,), "short", {"v": 1}, ttl=2)
    (memory,) = memsvc.get_all(user)
    assert memory.expires_at is not None
    expected = before + datetime.timedelta(minutes=2)
    assert abs((memory.expires_at - expected).total_seconds()) < 30
    store.put((user,), "short", {"v": 2})  # a put without ttl: no expiry
    (memory,) = memsvc.get_all(user)
    assert memory.expires_at is None


def test_racing_puts_of_a_new_key_heal_at_the_next_put(
    store: MemsvcStore, memsvc: Memsvc, user: str
) -> None:
    # Two puts of a new key at the same moment can each add a memory.
    for n in (1, 2):
        memsvc.add(user, "x", metadata={"langgraph": {"key": "k"}, "value": {"n": n}})
    item = store.get((user,), "k")
    assert item is not None and item.value == {"n": 2}  # the newest
    store.put((user,), "k", {"n": 3})
    (memory,) = memsvc.get_all(user)
    assert memory.metadata["value"] == {"n": 3}


def test_the_async_api(store: MemsvcStore, user: str) -> None:
    async def scenario() -> None:
        await store.aput((user, "a"), "k", {"text": BEES})
        item = await store.aget((user, "a"), "k")
        assert item is not None and item.value == {"text": BEES}
        assert [i.key for i in await store.asearch((user,), query=PETS)] == ["k"]
        assert await store.alist_namespaces(prefix=(user,)) == [(user, "a")]
        await store.adelete((user, "a"), "k")
        assert await store.aget((user, "a"), "k") is None

    asyncio.run(scenario())


def test_it_takes_a_sync_client(server: Server, api_key: str) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            with pytest.raises(TypeError, match="takes a Memsvc"):
                MemsvcStore(client)  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_no_other_tenants_items_come_back(server: Server, store: MemsvcStore, user: str) -> None:
    store.put((user,), "k", {"text": BEES})
    with Memsvc(server.url, api_key=server.create_key("other-tenant", "lg")) as other:
        theirs = MemsvcStore(other)
        assert theirs.get((user,), "k") is None
        assert theirs.search((user,), query=PETS) == []
        assert theirs.list_namespaces(prefix=(user,)) == []
        theirs.put((user,), "k", {"text": "theirs"})
    item = store.get((user,), "k")
    assert item is not None and item.value == {"text": BEES}


def test_langmem_keeps_its_memories_in_memsvc(memsvc: Memsvc, user: str) -> None:
    store = MemsvcStore(memsvc, fields=["content"])
    namespace = ("memories", user)
    manage = create_manage_memory_tool(namespace=namespace, store=store)
    search = create_search_memory_tool(namespace=namespace, store=store)

    created = manage.invoke({"content": BEES, "action": "create"})
    key = created.removeprefix("created memory ")
    (memory,) = memsvc.get_all(f"memories.{user}")
    assert memory.content == BEES and memory.metadata["langgraph"] == {"key": key}

    (found,) = json.loads(search.invoke({"query": PETS}))
    assert found["key"] == key and found["value"] == {"content": BEES}
    assert found["namespace"] == ["memories", user] and found["score"] > 0.35

    manage.invoke({"content": "Dan keeps goats", "action": "update", "id": key})
    assert [m.content for m in memsvc.get_all(f"memories.{user}")] == ["Dan keeps goats"]
    manage.invoke({"action": "delete", "id": key})
    assert memsvc.get_all(f"memories.{user}") == []


class State(TypedDict):
    question: str
    remembered: list[str]


class Context(TypedDict):
    user_id: str


def test_a_graph_reads_and_writes_its_store(memsvc: Memsvc, user: str) -> None:
    def remember(state: State, runtime: Runtime[Context]) -> dict[str, t.Any]:
        assert runtime.store is not None
        namespace = ("memories", runtime.context["user_id"])
        found = runtime.store.search(namespace, query=state["question"])
        runtime.store.put(namespace, f"q{len(found)}", {"content": state["question"]})
        return {"remembered": [item.value["content"] for item in found]}

    builder = StateGraph(State, context_schema=Context)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    graph = builder.compile(store=MemsvcStore(memsvc, fields=["content"]))

    first = graph.invoke({"question": BEES, "remembered": []}, context={"user_id": user})
    second = graph.invoke({"question": PETS, "remembered": []}, context={"user_id": user})
    assert first["remembered"] == [] and second["remembered"] == [BEES]
    assert sorted(m.content for m in memsvc.get_all(f"memories.{user}")) == sorted([BEES, PETS])
