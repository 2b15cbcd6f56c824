"""memsvc_client.openai_agents on the OpenAI Agents SDK itself, against a real memsvc server.

The tools are called as the SDK's runner calls them, ``on_invoke_tool``
with a ``ToolContext`` and the model's arguments as JSON text: no model needed.
"""

from __future__ import annotations

import asyncio
import json
import typing as t

import pytest
from agents import Agent
from agents import FunctionTool
from agents.tool_context import ToolContext
from client_support import BEES
from client_support import PETS
from client_support import RECOMMENDED
from memsvc_client import AsyncMemsvc
from memsvc_client import Memsvc
from memsvc_client.openai_agents import memory_tools
from memsvc_server import Server

pytestmark = pytest.mark.e2e


@pytest.fixture
def loop() -> t.Iterator[asyncio.AbstractEventLoop]:
    """One event loop for a test's tool calls (an AsyncMemsvc stays on the loop it started on)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def call(loop: asyncio.AbstractEventLoop) -> t.Callable[..., t.Any]:
    """What the runner does with a model's tool call: the tool's answer to it."""

    def invoke(tool: FunctionTool, **arguments: t.Any) -> t.Any:
        raw = json.dumps(arguments)
        context = ToolContext(None, tool_name=tool.name, tool_call_id="call_1", tool_arguments=raw)
        return loop.run_until_complete(tool.on_invoke_tool(context, raw))

    return invoke


def test_two_strict_tools_a_model_reads_well(memsvc: Memsvc) -> None:
    tools = memory_tools(memsvc, "alice")
    assert [tool.name for tool in tools] == ["search_memories", "add_memory"]
    search, add = tools
    assert isinstance(search, FunctionTool) and search.strict_json_schema
    assert search.params_json_schema["properties"]["query"] == {
        "description": "What to look for, in natural language: a question or a topic.",
        "title": "Query",
        "type": "string",
    }
    assert search.params_json_schema["required"] == ["query"]
    assert search.params_json_schema["additionalProperties"] is False
    assert search.description.startswith("Search what you remember about the user")
    assert list(add.params_json_schema["properties"]) == ["content"]
    assert add.description.startswith("Remember something lasting about the user")
    # No user id among the parameters: the application chose it.
    agent = Agent(name="Assistant", tools=tools)
    assert [tool.name for tool in agent.tools] == ["search_memories", "add_memory"]


@pytest.fixture(params=["sync", "async"])
def clients(
    request: pytest.FixtureRequest, server: Server, api_key: str, loop: asyncio.AbstractEventLoop
) -> t.Iterator[t.Callable[..., list[FunctionTool]]]:
    """memory_tools for a user, over a Memsvc or an AsyncMemsvc."""
    client: Memsvc | AsyncMemsvc
    if request.param == "sync":
        client = Memsvc(server.url, api_key=api_key)
    else:
        client = AsyncMemsvc(server.url, api_key=api_key)
    yield lambda user, **options: memory_tools(client, user, **options)
    if isinstance(client, AsyncMemsvc):
        loop.run_until_complete(client.close())
    else:
        client.close()


def test_the_tools_remember_and_find_for_their_user(
    clients: t.Callable[..., list[FunctionTool]],
    call: t.Callable[..., t.Any],
    memsvc: Memsvc,
    user: str,
) -> None:
    search, add = clients(user, metadata={"source": "agent"})
    added = json.loads(call(add, content=BEES))
    assert added["content"] == BEES and added["metadata"] == {"source": "agent"}
    (memory,) = memsvc.get_all(user)
    assert memory.id == added["id"] and memory.user_id == user

    assert json.loads(call(add, content=BEES))["id"] == memory.id  # stored once
    (found,) = json.loads(call(search, query=PETS))
    assert found["id"] == memory.id and found["content"] == BEES
    assert RECOMMENDED <= found["similarity"] < 0.7
    assert json.loads(call(search, query="What is the capital of Peru?")) == []


def test_search_options_are_the_applications(
    call: t.Callable[..., t.Any], memsvc: Memsvc, user: str
) -> None:
    memsvc.add(user, BEES, metadata={"kind": "hobby"})
    memsvc.add(user, "Dan grows tomatoes in his garden", metadata={"kind": "garden"})
    search, _ = memory_tools(memsvc, user, threshold=0, limit=1, filter={"kind": "garden"})
    (found,) = json.loads(call(search, query=PETS))
    assert found["content"] == "Dan grows tomatoes in his garden"


def test_a_failed_call_tells_the_model_memsvcs_reason(
    clients: t.Callable[..., list[FunctionTool]],
    call: t.Callable[..., t.Any],
    memsvc: Memsvc,
    user: str,
) -> None:
    _, add = clients(user)
    answer = call(add, content=" ")
    assert answer == "Invalid input: content: must not be empty (BAD_REQUEST)"
    assert memsvc.get_all(user) == []


def test_no_other_users_or_tenants_memories_come_back(
    server: Server, call: t.Callable[..., t.Any], memsvc: Memsvc, user: str
) -> None:
    memsvc.add(f"{user}-other", BEES)
    with Memsvc(server.url, api_key=server.create_key("other-tenant", "agents")) as other:
        other.add(user, BEES)
    search, _ = memory_tools(memsvc, user, threshold=0, limit=100)
    assert json.loads(call(search, query=PETS)) == []
    mine = memsvc.add(user, BEES)
    assert [m["id"] for m in json.loads(call(search, query=PETS))] == [mine.id]
