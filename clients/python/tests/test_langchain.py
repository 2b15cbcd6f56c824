"""memsvc_client.langchain on langchain-core itself, against a real memsvc server."""

from __future__ import annotations

import asyncio
import typing as t

import pytest
from client_support import BEES
from client_support import BUDGET
from client_support import PETS
from client_support import RECOMMENDED
from client_support import WIRE_DEFAULT
from client_support import ZEBRA
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from memsvc_client import AsyncMemsvc
from memsvc_client import Memsvc
from memsvc_client.langchain import MemsvcRetriever
from memsvc_server import Server
from pydantic import ValidationError

pytestmark = pytest.mark.e2e


def test_a_retriever_finds_the_users_memories_as_documents(memsvc: Memsvc, user: str) -> None:
    memory = memsvc.add(user, BEES, metadata={"kind": "hobby"})
    retriever = MemsvcRetriever(client=memsvc, user_id=user)
    assert isinstance(retriever, BaseRetriever)

    (doc,) = retriever.invoke(PETS)

    assert isinstance(doc, Document)
    assert doc.page_content == BEES and doc.id == memory.id
    # The memory's other fields, in the wire's names; no threshold given: the
    # recommended one, under which the API's default would have found nothing.
    assert doc.metadata["id"] == memory.id and doc.metadata["userId"] == user
    assert doc.metadata["metadata"] == {"kind": "hobby"}
    assert doc.metadata["createdAt"] == memory.to_dict()["createdAt"]
    assert RECOMMENDED <= doc.metadata["similarity"] < WIRE_DEFAULT
    assert doc.metadata["matchedBy"] == ["keyword", "semantic"]  # hybrid, the client's default
    assert "content" not in doc.metadata


def test_k_mode_threshold_and_filter_reach_the_search(memsvc: Memsvc, user: str) -> None:
    bees = memsvc.add(user, BEES, metadata={"kind": "hobby"})
    budget = memsvc.add(user, BUDGET, metadata={"kind": "work"})
    memsvc.add(user, "Dan grows tomatoes in his garden", metadata={"kind": "hobby"})

    def ids(query: str = PETS, **options: t.Any) -> list[str | None]:
        retriever = MemsvcRetriever(client=memsvc, user_id=user, **options)
        return [doc.id for doc in retriever.invoke(query)]

    assert len(ids(threshold=0)) == 3
    assert len(ids(threshold=0, k=1)) == 1
    assert ids(threshold=WIRE_DEFAULT) == []
    assert ids(query=ZEBRA, mode="keyword") == [budget.id]  # keyword: no floor
    assert ids(query=ZEBRA) == []  # hybrid keeps the recommended floor
    assert ids(threshold=0, filter={"kind": "work"}) == [budget.id]
    assert ids(threshold=0, k=1, filter={"kind": "hobby"})[0] == bees.id


def test_its_settings_are_checked_when_it_is_made(memsvc: Memsvc) -> None:
    with pytest.raises(ValidationError):
        MemsvcRetriever(client=memsvc, user_id="u", k=0)
    with pytest.raises(ValidationError):
        MemsvcRetriever(client=memsvc, user_id="u", mode="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MemsvcRetriever(client="http://127.0.0.1:8000", user_id="u")  # type: ignore[arg-type]


def test_async_with_either_client(server: Server, api_key: str, memsvc: Memsvc, user: str) -> None:
    memory = memsvc.add(user, BEES)

    async def scenario() -> tuple[list[Document], list[Document]]:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            native = MemsvcRetriever(client=client, user_id=user)
            threaded = MemsvcRetriever(client=memsvc, user_id=user)
            return await native.ainvoke(PETS), await threaded.ainvoke(PETS)

    native, threaded = asyncio.run(scenario())
    assert [d.id for d in native] == [d.id for d in threaded] == [memory.id]


def test_an_async_client_says_invoke_needs_a_sync_one(server: Server, api_key: str) -> None:
    async def scenario() -> None:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            with pytest.raises(TypeError, match="ainvoke only"):
                MemsvcRetriever(client=client, user_id="u").invoke(PETS)

    asyncio.run(scenario())


def test_no_other_users_or_tenants_memories_come_back(
    server: Server, api_key: str, memsvc: Memsvc, user: str
) -> None:
    other_user = f"{user}-other"
    mine = memsvc.add(user, BEES)
    memsvc.add(other_user, BEES)
    with Memsvc(server.url, api_key=server.create_key("other-tenant", "lc")) as other_tenant:
        other_tenant.add(user, BEES)  # the same user id, in another tenant
        assert len(MemsvcRetriever(client=other_tenant, user_id=user).invoke(PETS)) == 1
    found = MemsvcRetriever(client=memsvc, user_id=user, threshold=0, k=100).invoke(PETS)
    assert [d.id for d in found] == [mine.id]
    assert {d.metadata["userId"] for d in found} == {user}


def test_it_composes_like_any_runnable(memsvc: Memsvc, user: str) -> None:
    memsvc.add(user, BEES)
    retriever = MemsvcRetriever(client=memsvc, user_id=user)
    chain = retriever | RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    assert chain.invoke(PETS) == BEES
    assert retriever.batch([PETS, "Who is Dan's dentist?"])[0][0].page_content == BEES
