"""docs/clients.md: its Python examples and its MCP host configuration, run as written."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import typing as t

import pytest
from client_support import REPO
from client_support import blocks
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client
from memsvc_client import Memsvc
from memsvc_server import Server

pytestmark = pytest.mark.e2e

DOC = REPO / "docs" / "clients.md"
README = REPO / "clients" / "python" / "README.md"
DOC_URL = "http://127.0.0.1:8000"
NUMBER = re.compile(r"-?\d+\.\d+")
MASKS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"), "<time>"),
]


def examples(lang: str, path: pathlib.Path = DOC) -> list[tuple[int, str, str | None]]:
    """A document's runnable blocks in ``lang``: line, code, and the text block after it."""
    doc = blocks(path.read_text())
    out = []
    for i, block in enumerate(doc):
        if block.lang != lang or not block.run:
            continue
        if re.match(r"# [\w.-]+\.py:", block.code):
            # A file of a generated client's quick start, run with its generated
            # package by tests/e2e/test_generated_clients.py.
            continue
        following = doc[i + 1] if i + 1 < len(doc) else None
        shown = following.code if following is not None and following.lang == "text" else None
        out.append((block.line, block.code, shown))
    return out


def same_output(got: str, want: str) -> bool:
    """Equal once ids and times are masked, numbers within 0.02 (int8 inference varies by CPU)."""
    for pattern, mask in MASKS:
        got, want = pattern.sub(mask, got), pattern.sub(mask, want)
    got_numbers, want_numbers = NUMBER.findall(got), NUMBER.findall(want)
    return (
        NUMBER.sub("<n>", got).strip() == NUMBER.sub("<n>", want).strip()
        and len(got_numbers) == len(want_numbers)
        and all(
            abs(float(g) - float(w)) < 0.02 for g, w in zip(got_numbers, want_numbers, strict=True)
        )
    )


@pytest.mark.parametrize(("path", "count"), [(DOC, 6), (README, 1)], ids=["docs", "readme"])
def test_the_python_examples_print_what_the_doc_shows(
    server: Server, tmp_path: pathlib.Path, path: pathlib.Path, count: int
) -> None:
    found = examples("python", path)
    assert len(found) == count, f"every Python example of {path.name} is run"
    # A tenant of its own: the examples' end users (alice, bob...) start empty.
    tenant = f"docs-{path.parent.name}"
    env = {**os.environ, "MEMSVC_API_KEY": server.create_key(tenant, "docs")}
    for line, code, shown in found:
        assert shown is not None, f"the example at line {line} shows no output"
        assert DOC_URL in code
        result = subprocess.run(
            [sys.executable, "-c", code.replace(DOC_URL, server.url)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"line {line}:\n{result.stderr}"
        assert same_output(result.stdout, shown), (
            f"{path.name}, example at line {line}:\n got: {result.stdout}\nwant: {shown}"
        )


def test_the_mcp_host_configuration_starts_a_working_server(
    server: Server, api_key: str, memsvc: Memsvc, tmp_path: pathlib.Path
) -> None:
    configs = [json.loads(code) for _, code, _ in examples("json") if "mcpServers" in code]
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
