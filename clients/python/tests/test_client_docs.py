"""docs/clients.md: its Python examples and its MCP host configuration, run as written."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import typing as t

import pytest
from client_support import DOC_URL
from client_support import REPO
from client_support import examples
from client_support import run_example
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client
from memsvc_client import Memsvc
from memsvc_server import Server

pytestmark = pytest.mark.e2e

DOC = REPO / "docs" / "clients.md"
README = REPO / "clients" / "python" / "README.md"


@pytest.mark.parametrize(("path", "count"), [(DOC, 10), (README, 1)], ids=["docs", "readme"])
def test_the_python_examples_print_what_the_doc_shows(
    server: Server, tmp_path: pathlib.Path, path: pathlib.Path, count: int
) -> None:
    found = examples("python", path)
    assert len(found) == count, f"every Python example of {path.name} is run"
    # A tenant of its own: the examples' end users (alice, bob...) start empty.
    key = server.create_key(f"docs-{path.parent.name}", "docs")
    for example in found:
        run_example(example, server, key, tmp_path, path.name)


def test_the_mcp_host_configuration_starts_a_working_server(
    server: Server, api_key: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    configs = [json.loads(e.code) for e in examples("json") if "mcpServers" in e.code]
    assert len(configs) == 1
    entry = configs[0]["mcpServers"]["memsvc"]
    assert entry["command"] == "memsvc-mcp"
    # As a host would start it, with this server and a real key in place of the doc's.
    command = str(pathlib.Path(sys.executable).parent / entry["command"])
    args = [server.url if a == DOC_URL else a for a in entry["args"]]
    env = {k: api_key if k == "MEMSVC_API_KEY" else v for k, v in entry["env"].items()}
    assert env["MEMSVC_API_KEY"] == api_key and server.url in args
    user = args[args.index("--user-id") + 1]
    memsvc.delete_all(user)

    async def scenario() -> tuple[list[str], t.Any]:
        params = StdioServerParameters(command=command, args=args, env=env)
        with (tmp_path / "err.log").open("w") as err:
            async with Client(stdio_client(params, err)) as client:
                tools = [tool.name for tool in (await client.list_tools()).tools]
                added = await client.call_tool("add_memory", {"content": "Alice likes hiking"})
                assert not added.is_error
                return tools, json.loads(added.content[0].text)  # type: ignore[union-attr]

    tools, added = asyncio.run(scenario())
    assert len(tools) == 7
    assert memsvc.get(added["id"]).user_id == user == "alice"
    memsvc.delete_all(user)
