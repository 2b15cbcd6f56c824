"""memsvc-mcp end to end: spawned over stdio by the MCP SDK's own client, on a real memsvc."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import typing as t

import pytest
from client_support import BEES
from client_support import BUDGET
from client_support import PETS
from client_support import RECOMMENDED
from client_support import WIRE_DEFAULT
from client_support import ZEBRA
from client_support import refused_url
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult
from memsvc_client import Memsvc
from memsvc_server import Server

pytestmark = pytest.mark.e2e

COMMAND = str(pathlib.Path(sys.executable).parent / "memsvc-mcp")
TOOLS = {
    "add_memory": ({"content", "metadata"}, ["content"]),
    "search_memories": (
        {"query", "limit", "mode", "threshold", "filter", "explain"},
        ["query"],
    ),
    "list_memories": ({"limit", "cursor"}, []),
    "get_memory": ({"id"}, ["id"]),
    "update_memory": ({"id", "content", "metadata"}, ["id"]),
    "delete_memory": ({"id"}, ["id"]),
    "delete_all_memories": ({"confirm"}, ["confirm"]),
}
MISSING = "00000000-0000-4000-8000-000000000000"


@contextlib.asynccontextmanager
async def mcp(
    url: str, key: str, user_id: str | None, errlog: pathlib.Path, *args: str
) -> t.AsyncIterator[Client]:
    """A session with a memsvc-mcp subprocess configured through its environment."""
    env = {"MEMSVC_URL": url, "MEMSVC_API_KEY": key}
    if user_id is not None:
        env["MEMSVC_USER_ID"] = user_id
    params = StdioServerParameters(command=COMMAND, args=list(args), env=env)
    with errlog.open("a") as err:
        async with Client(stdio_client(params, err)) as c:
            yield c


def ok(result: CallToolResult) -> t.Any:
    """A tool's JSON answer; fails on a tool error."""
    assert not result.is_error, result.content
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert result.structured_content is None  # compact text only
    return json.loads(result.content[0].text)


def failed(result: CallToolResult) -> str:
    """A tool error's message."""
    assert result.is_error, result.content
    return result.content[0].text  # type: ignore[union-attr]


def run(coroutine: t.Coroutine[t.Any, t.Any, t.Any]) -> t.Any:
    return asyncio.run(coroutine)


def test_the_tools_and_their_input_schemas(
    server: Server, api_key: str, user: str, tmp_path: pathlib.Path
) -> None:
    async def listed(user_id: str | None) -> dict[str, t.Any]:
        async with mcp(server.url, api_key, user_id, tmp_path / "err.log") as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    for_one_user = run(listed(user))
    assert set(for_one_user) == set(TOOLS)
    for name, (properties, required) in TOOLS.items():
        schema = for_one_user[name].input_schema
        assert set(schema["properties"]) == properties, name
        assert sorted(schema.get("required", [])) == sorted(required), name
        assert for_one_user[name].description
    assert for_one_user["delete_all_memories"].input_schema["properties"]["confirm"]["type"] == (
        "boolean"
    )
    assert for_one_user["delete_memory"].annotations.destructive_hint is True
    assert for_one_user["search_memories"].annotations.read_only_hint is True

    search = for_one_user["search_memories"].input_schema["properties"]
    assert search["mode"]["anyOf"][0]["enum"] == ["semantic", "keyword", "hybrid"]
    assert "(default: hybrid)" in search["mode"]["description"]
    threshold = search["threshold"]["description"]
    assert "recommends" in threshold and "keyword searches have no floor" in threshold
    assert search["explain"]["type"] == "boolean" and search["explain"]["default"] is False

    for_each_call = run(listed(None))
    assert set(for_each_call) == set(TOOLS)
    for name, (properties, required) in TOOLS.items():
        schema = for_each_call[name].input_schema
        assert set(schema["properties"]) == properties | {"user_id"}, name
        assert sorted(schema["required"]) == sorted([*required, "user_id"]), name


def test_add_search_list_get_update_delete(
    server: Server, api_key: str, user: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    async def scenario() -> dict[str, t.Any]:
        async with mcp(server.url, api_key, user, tmp_path / "err.log") as client:
            out: dict[str, t.Any] = {}
            call = client.call_tool
            out["cello"] = ok(
                await call(
                    "add_memory",
                    {"content": "Alice plays the cello", "metadata": {"kind": "music"}},
                )
            )
            out["tea"] = ok(await call("add_memory", {"content": "Alice drinks green tea"}))
            out["city"] = ok(await call("add_memory", {"content": "Alice lives in Porto"}))
            # No threshold: the deployment's recommended one (0.35 here).
            out["search"] = ok(await call("search_memories", {"query": "Alice plays the cello"}))
            out["search_all"] = ok(
                await call("search_memories", {"query": "cello", "threshold": 0, "limit": 2})
            )
            out["music"] = ok(
                await call(
                    "search_memories",
                    {"query": "anything", "threshold": 0, "filter": {"kind": "music"}},
                )
            )
            out["page1"] = ok(await call("list_memories", {"limit": 2}))
            out["page2"] = ok(
                await call("list_memories", {"limit": 2, "cursor": out["page1"]["nextCursor"]})
            )
            out["get"] = ok(await call("get_memory", {"id": out["tea"]["id"]}))
            out["update"] = ok(
                await call(
                    "update_memory", {"id": out["tea"]["id"], "content": "Alice drinks oolong"}
                )
            )
            out["delete"] = ok(await call("delete_memory", {"id": out["city"]["id"]}))
            out["gone"] = failed(await call("get_memory", {"id": out["city"]["id"]}))
            out["nothing"] = failed(await call("update_memory", {"id": out["tea"]["id"]}))
            return out

    out = run(scenario())
    cello, tea, city = out["cello"], out["tea"], out["city"]
    assert set(cello) == {"id", "content", "metadata", "createdAt"}
    assert cello["metadata"] == {"kind": "music"} and "metadata" not in tea  # empty: left out
    assert out["search"][0]["id"] == cello["id"]
    assert 0.99 <= out["search"][0]["similarity"] <= 1
    assert all(m["similarity"] >= 0.35 for m in out["search"])
    assert len(out["search_all"]) == 2 and out["search_all"][0]["id"] == cello["id"]
    assert [m["id"] for m in out["music"]] == [cello["id"]]
    assert [m["id"] for m in out["page1"]["memories"]] == [city["id"], tea["id"]]
    assert out["page2"] == {"memories": [out["page2"]["memories"][0]], "nextCursor": None}
    assert out["page2"]["memories"][0]["id"] == cello["id"]
    assert out["get"] == tea
    assert out["update"]["content"] == "Alice drinks oolong" and "updatedAt" in out["update"]
    assert out["delete"] == {"deleted": city["id"]}
    assert "Memory not found" in out["gone"]
    assert "Nothing to update" in out["nothing"]
    # What the tools did is what memsvc holds, for this end user.
    stored = {m.id: m for m in memsvc.get_all(user)}
    assert set(stored) == {cello["id"], tea["id"]}
    assert stored[tea["id"]].content == "Alice drinks oolong"
    assert stored[cello["id"]].metadata == {"kind": "music"}


def test_search_defaults_hybrid_recommended_threshold_no_keyword_floor_and_explain(
    server: Server, api_key: str, user: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    bees = memsvc.add(user, BEES)
    budget = memsvc.add(user, BUDGET)

    async def scenario() -> dict[str, t.Any]:
        out: dict[str, t.Any] = {}
        async with mcp(server.url, api_key, user, tmp_path / "err.log") as client:

            async def search(**arguments: t.Any) -> t.Any:
                return ok(await client.call_tool("search_memories", arguments))

            out["natural"] = await search(query=PETS)
            out["given"] = await search(query=PETS, threshold=WIRE_DEFAULT)
            out["keyword"] = await search(query=ZEBRA, mode="keyword")
            out["hybrid"] = await search(query=ZEBRA)
            out["explained"] = await search(query=PETS, explain=True)
            out["semantic"] = await search(query=PETS, explain=True, mode="semantic")
        semantic_server = ("--default-mode", "semantic")
        async with mcp(server.url, api_key, user, tmp_path / "err.log", *semantic_server) as c:
            arguments = {"query": PETS, "explain": True}
            out["semantic_server"] = ok(await c.call_tool("search_memories", arguments))
        return out

    out = run(scenario())
    # No threshold: the recommended one, not the wire's 0.7.
    assert [m["id"] for m in out["natural"]] == [bees.id]
    assert RECOMMENDED <= out["natural"][0]["similarity"] < WIRE_DEFAULT
    assert out["given"] == []
    # Keyword mode: no floor; hybrid keeps the recommended one.
    assert [m["id"] for m in out["keyword"]] == [budget.id]
    assert out["keyword"][0]["similarity"] < RECOMMENDED
    assert out["hybrid"] == []
    # Hybrid by default (the keyword match raised the score); mode or --default-mode overrides.
    (explained,) = out["explained"]
    assert explained["explain"]["cosine"] == explained["similarity"]
    assert explained["explain"]["keyword"] > 0
    assert explained["explain"]["score"] > explained["similarity"]
    for semantic in (out["semantic"], out["semantic_server"]):
        assert semantic[0]["explain"] == {
            "cosine": explained["similarity"],
            "keyword": None,
            "score": explained["similarity"],
        }
    assert "explain" not in out["natural"][0]


def test_delete_all_needs_confirm_and_spares_other_users(
    server: Server, api_key: str, user: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    other = user + "-neighbour"
    for i in range(3):
        memsvc.add(user, f"mine {i}")
    theirs = memsvc.add(other, "my neighbour's memory")

    async def scenario() -> tuple[str, t.Any, t.Any]:
        async with mcp(server.url, api_key, user, tmp_path / "err.log") as client:
            missing = failed(await client.call_tool("delete_all_memories", {}))
            refused = ok(await client.call_tool("delete_all_memories", {"confirm": False}))
            assert len(memsvc.get_all(user)) == 3  # nothing deleted so far
            done = ok(await client.call_tool("delete_all_memories", {"confirm": True}))
            return missing, refused, done

    missing, refused, done = run(scenario())
    assert "confirm" in missing
    assert refused["deleted"] == 0 and "confirm" in refused["message"]
    assert done == {"deleted": 3}
    assert memsvc.get_all(user) == []
    assert memsvc.get_all(other) == [theirs]  # same tenant, other end user: untouched


def test_tool_errors_carry_memsvcs_message(
    server: Server, api_key: str, user: str, tmp_path: pathlib.Path
) -> None:
    async def scenario() -> list[str]:
        async with mcp(server.url, api_key, user, tmp_path / "err.log") as client:
            return [
                failed(await client.call_tool("add_memory", {"content": "   "})),
                failed(await client.call_tool("get_memory", {"id": "not-a-uuid"})),
                failed(await client.call_tool("search_memories", {"query": "x", "limit": 500})),
            ]

    blank, bad_id, limit = run(scenario())
    assert "content" in blank and "BAD_REQUEST" in blank
    assert "must be a UUID" in bad_id and "BAD_REQUEST" in bad_id
    assert "limit" in limit  # refused by the tool's schema, before memsvc


def test_another_end_users_memory_is_unreachable(
    server: Server, api_key: str, user: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    other = user + "-other"
    theirs = memsvc.add(other, "a secret of another end user")

    async def scenario() -> tuple[list[str], list[str], t.Any, t.Any]:
        async with mcp(server.url, api_key, user, tmp_path / "err.log") as client:
            call = client.call_tool
            refusals = [
                failed(await call("get_memory", {"id": theirs.id})),
                failed(await call("update_memory", {"id": theirs.id, "content": "overwritten"})),
                failed(await call("delete_memory", {"id": theirs.id})),
            ]
            missing = [
                failed(await call("get_memory", {"id": MISSING})),
                failed(await call("update_memory", {"id": MISSING, "content": "overwritten"})),
                failed(await call("delete_memory", {"id": MISSING})),
            ]
            found = ok(await call("search_memories", {"query": "secret", "threshold": 0}))
            listed = ok(await call("list_memories", {}))
            return refusals, missing, found, listed

    refusals, missing, found, listed = run(scenario())
    assert refusals == missing  # indistinguishable from a memory that does not exist
    assert all("Memory not found" in text for text in refusals)
    assert found == [] and listed == {"memories": [], "nextCursor": None}
    assert memsvc.get(theirs.id) == theirs  # untouched
    assert len(memsvc.history(theirs.id)) == 1


def test_without_a_configured_user_each_tool_takes_user_id(
    server: Server, api_key: str, user: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    other = user + "-other"

    async def scenario() -> tuple[t.Any, t.Any, t.Any, str]:
        async with mcp(server.url, api_key, None, tmp_path / "err.log") as client:
            call = client.call_tool
            added = ok(await call("add_memory", {"user_id": user, "content": "likes sailing"}))
            mine = ok(await call("list_memories", {"user_id": user}))
            theirs = ok(await call("list_memories", {"user_id": other}))
            crossed = failed(await call("get_memory", {"user_id": other, "id": added["id"]}))
            return added, mine, theirs, crossed

    added, mine, theirs, crossed = run(scenario())
    assert [m["id"] for m in mine["memories"]] == [added["id"]]
    assert theirs["memories"] == []
    assert "Memory not found" in crossed
    assert memsvc.get(added["id"]).user_id == user


def test_the_api_key_never_appears_in_results_or_logs(
    server: Server, api_key: str, user: str, tmp_path: pathlib.Path
) -> None:
    errlog = tmp_path / "err.log"

    calls = [
        ("add_memory", {"content": "a memory"}),
        ("search_memories", {"query": "memory"}),
        ("list_memories", {}),
        ("get_memory", {"id": "bad"}),
        ("add_memory", {"content": ""}),
    ]

    async def scenario(url: str, calls: list[tuple[str, dict[str, t.Any]]]) -> list[str]:
        async with mcp(url, api_key, user, errlog) as client:
            results = [await client.call_tool(name, args) for name, args in calls]
            return [c.text for r in results for c in r.content]  # type: ignore[union-attr]

    # And where nothing answers (each call retried, then failing).
    texts = run(scenario(server.url, calls)) + run(scenario(refused_url(), calls[:2]))
    assert any("no answer from memsvc" in text for text in texts)  # the failing server's
    secret = api_key.removeprefix("sk_memsvc_")
    for text in [*texts, errlog.read_text()]:
        assert secret not in text and secret[:16] not in text


def test_it_refuses_to_start_without_a_url_or_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")}
    no_url = subprocess.run([COMMAND], env=env, capture_output=True, text=True, timeout=60)
    assert no_url.returncode == 2 and "MEMSVC_URL" in no_url.stderr
    no_key = subprocess.run(
        [COMMAND, "--url", "http://127.0.0.1:9"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert no_key.returncode == 2 and "MEMSVC_API_KEY" in no_key.stderr
    assert "Traceback" not in no_url.stderr + no_key.stderr
