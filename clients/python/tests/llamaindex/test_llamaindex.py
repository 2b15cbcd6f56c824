"""memsvc_client.llamaindex on llama-index-core itself, against a real memsvc server.

These run in the LlamaIndex virtualenv (``.venv-llamaindex``), started by
``clients/python/tests/test_llamaindex.py``; the server is the main
virtualenv's ``memsvc``.
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest
from client_support import BEES
from client_support import PETS
from client_support import RECOMMENDED
from client_support import WIRE_DEFAULT
from client_support import examples
from client_support import run_example
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import MetadataMode
from llama_index.core.schema import NodeWithScore
from llama_index.core.schema import TextNode
from memsvc_client import AsyncMemsvc
from memsvc_client import Memsvc
from memsvc_client.llamaindex import MemsvcMemoryBlock
from memsvc_client.llamaindex import MemsvcRetriever
from memsvc_server import Server
from sqlalchemy.ext.asyncio import create_async_engine

pytestmark = pytest.mark.e2e


def test_a_retriever_finds_the_users_memories_as_nodes(memsvc: Memsvc, user: str) -> None:
    memory = memsvc.add(user, BEES, metadata={"kind": "hobby"})
    retriever = MemsvcRetriever(memsvc, user)
    assert isinstance(retriever, BaseRetriever)

    (found,) = retriever.retrieve(PETS)

    assert isinstance(found, NodeWithScore) and isinstance(found.node, TextNode)
    assert found.node.id_ == memory.id and found.node.text == BEES
    assert found.score is not None and RECOMMENDED <= found.score < WIRE_DEFAULT
    assert found.node.metadata["userId"] == user
    assert found.node.metadata["metadata"] == {"kind": "hobby"}
    assert found.node.metadata["createdAt"] == memory.to_dict()["createdAt"]
    shown = found.node.get_content(MetadataMode.LLM)
    assert BEES in shown and "createdAt" in shown and "hobby" in shown
    assert user not in shown and "similarity" not in shown
    assert found.node.get_content(MetadataMode.EMBED) == BEES


def test_its_options_reach_the_search(memsvc: Memsvc, user: str) -> None:
    memsvc.add(user, BEES, metadata={"kind": "hobby"})
    tomatoes = memsvc.add(user, "Dan grows tomatoes in his garden", metadata={"kind": "garden"})
    assert len(MemsvcRetriever(memsvc, user, threshold=0).retrieve(PETS)) == 2  # top_k 2
    assert len(MemsvcRetriever(memsvc, user, threshold=0, similarity_top_k=1).retrieve(PETS)) == 1
    assert MemsvcRetriever(memsvc, user, threshold=WIRE_DEFAULT).retrieve(PETS) == []
    only = MemsvcRetriever(memsvc, user, threshold=0, filter={"kind": "garden"}).retrieve(PETS)
    assert [n.node.id_ for n in only] == [tomatoes.id]
    keyword = MemsvcRetriever(memsvc, user, mode="keyword").retrieve("tomatoes")
    assert [n.node.id_ for n in keyword] == [tomatoes.id]


def test_async_with_either_client(server: Server, api_key: str, memsvc: Memsvc, user: str) -> None:
    memory = memsvc.add(user, BEES)

    async def scenario() -> tuple[list[NodeWithScore], list[NodeWithScore]]:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            native = await MemsvcRetriever(client, user).aretrieve(PETS)
            with pytest.raises(TypeError, match="aretrieve only"):
                MemsvcRetriever(client, user).retrieve(PETS)
            return native, await MemsvcRetriever(memsvc, user).aretrieve(PETS)

    native, threaded = asyncio.run(scenario())
    assert [n.node.id_ for n in native] == [n.node.id_ for n in threaded] == [memory.id]


def test_no_other_users_or_tenants_memories_come_back(
    server: Server, memsvc: Memsvc, user: str
) -> None:
    memsvc.add(f"{user}-other", BEES)
    with Memsvc(server.url, api_key=server.create_key("other-tenant", "li")) as other:
        other.add(user, BEES)
    retriever = MemsvcRetriever(memsvc, user, threshold=0, similarity_top_k=100)
    assert retriever.retrieve(PETS) == []
    mine = memsvc.add(user, BEES)
    assert [n.node.id_ for n in retriever.retrieve(PETS)] == [mine.id]
    block = MemsvcMemoryBlock(client=memsvc, user_id=f"{user}-nobody", threshold=0)
    assert asyncio.run(block.aget([ChatMessage(role="user", content=PETS)])) == ""


def test_the_memory_block_keeps_what_short_term_memory_lets_go(
    server: Server, api_key: str, memsvc: Memsvc, user: str
) -> None:
    async def scenario() -> list[ChatMessage]:
        async with AsyncMemsvc(server.url, api_key=api_key) as client:
            block = MemsvcMemoryBlock(client=client, user_id=user, metadata={"app": "demo"})
            assert isinstance(block, BaseMemoryBlock)
            # The short-term memory's own store: SQLite in memory, closed at the end.
            engine = create_async_engine("sqlite+aiosqlite:///:memory:")
            memory = Memory.from_defaults(
                session_id="s-1",
                token_limit=60,
                token_flush_size=10,
                memory_blocks=[block],
                async_engine=engine,
            )
            turns = [
                ("user", BEES),
                ("assistant", "Noted: bees in the garden."),
                ("user", "Also, my sister Ana lives in Lisbon and teaches piano."),
                ("assistant", "Ana, Lisbon, piano: noted."),
                ("user", "What's the weather like this weekend?"),
                ("assistant", "Sunny, around 24 degrees."),
            ]
            try:
                for role, content in turns:
                    await memory.aput(ChatMessage(role=role, content=content))
                return await memory.aget(input=PETS)
            finally:
                await engine.dispose()

    messages = asyncio.run(scenario())
    stored = memsvc.get_all(user)
    # The oldest messages were let go, each now a memory with its role and session.
    assert stored and stored[-1].content == BEES
    assert stored[-1].metadata == {"app": "demo", "role": "user", "sessionId": "s-1"}
    assert BEES not in [m.content for m in messages[1:]]  # no longer in the chat history
    # ...and come back, in the system message, for a question they answer.
    system = messages[0]
    assert system.role == "system" and "<memories>" in (system.content or "")
    assert f"- {BEES}" in (system.content or "")


def test_the_docs_llamaindex_example_prints_what_they_show(
    server: Server, tmp_path: pathlib.Path
) -> None:
    (example,) = examples("python", llamaindex=True)
    run_example(example, server, server.create_key("docs-llamaindex", "docs"), tmp_path, "docs")
