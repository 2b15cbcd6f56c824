"""memsvc-mcp: an end user's memories as MCP tools, over stdio.

Every tool acts for one end user: the one configured (``--user-id``), or,
without it, the ``user_id`` argument each tool then takes. memsvc scopes a
memory id only by tenant (the API key's owner), so tools that take an id
first check that the memory is that user's, and answer "not found" when it
is not: one end user's memories never reach another's conversation.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import logging
import os
import typing as t

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from ._core import DEFAULT_MODE
from ._core import MODES
from ._core import Mode
from ._tools import compact
from ._tools import dumps as _json
from ._version import __version__
from .aio import AsyncMemsvc
from .errors import MemsvcError

# Argument types, with the descriptions MCP hosts show the model. Module
# level: the tools' annotations are strings, resolved in this namespace.
UserId = t.Annotated[str, Field(description="The end user the memories belong to.")]
MemoryId = t.Annotated[str, Field(description="A memory's id (a UUID).")]
Content = t.Annotated[str, Field(description="The text to remember.")]
Query = t.Annotated[str, Field(description="What to look for, in natural language.")]
Metadata = t.Annotated[
    dict[str, t.Any] | None, Field(description="Optional JSON object stored with the memory.")
]
Limit = t.Annotated[int | None, Field(description="How many at most (1 to 100).", ge=1, le=100)]
Threshold = t.Annotated[
    float | None,
    Field(
        description="Least cosine similarity (0 to 1) a result must have, in every mode. "
        "Usually omit it: semantic and hybrid searches then use the threshold the "
        "deployment recommends for its embedding model, and keyword searches have no floor.",
        ge=0,
        le=1,
    ),
]
ExplainFlag = t.Annotated[
    bool,
    Field(
        description="Also show, per result, why it ranked there: its cosine, its keyword "
        "match's strength (null: no query word matched) and the score its mode ranked by."
    ),
]
#: Replaced per server by :func:`mode_type` (the default it names may be set).
SearchMode = t.Annotated[Mode | None, Field(description="How to match.")]
Filter = t.Annotated[
    dict[str, t.Any] | None,
    Field(
        description='Metadata conditions, e.g. {"category": "sport"} or {"year": {"gte": 2024}}.'
    ),
]
Cursor = t.Annotated[
    str | None, Field(description="nextCursor from the previous list_memories result.")
]
Confirm = t.Annotated[
    bool, Field(description="Must be true: deletes every memory of the user, for good.")
]

#: What a memory of another end user looks like: exactly a missing one.
NOT_FOUND = "Memory not found (NOT_FOUND)"

Tool = t.Callable[..., t.Awaitable[str]]


def mode_type(default: Mode) -> t.Any:
    """The ``mode`` argument's type, its description naming this server's default."""
    return t.Annotated[
        Mode | None,
        Field(
            description=f"How to match (default: {default}). hybrid: by meaning, ranking "
            "higher the memories that hold the query's words (names, numbers, codes); "
            "semantic: by meaning only; keyword: only memories holding the query's words, "
            "however different in meaning."
        ),
    ]


def _tool_errors(fn: Tool) -> Tool:
    """memsvc's errors as MCP tool errors with their message (other exceptions lose theirs)."""

    @functools.wraps(fn)
    async def wrapper(*args: t.Any, **kwargs: t.Any) -> str:
        try:
            return await fn(*args, **kwargs)
        except MemsvcError as e:
            raise ToolError(f"{e.message} ({e.code})") from e

    return wrapper


def tools(client: AsyncMemsvc) -> list[tuple[Tool, ToolAnnotations]]:
    """The tools, each taking ``user_id`` first, with their hints for hosts."""

    async def add_memory(user_id: UserId, content: Content, metadata: Metadata = None) -> str:
        """Remember something about the user: store it as a new memory."""
        return _json(compact(await client.add(user_id, content, metadata=metadata)))

    async def search_memories(
        user_id: UserId,
        query: Query,
        limit: Limit = None,
        mode: SearchMode = None,
        threshold: Threshold = None,
        filter: Filter = None,
        explain: ExplainFlag = False,
    ) -> str:
        """Find the user's memories that answer the query, best match first."""
        found = await client.search(
            user_id,
            query,
            limit=limit,
            mode=mode,
            threshold=threshold,
            filter=filter,
            explain=explain,
        )
        return _json([compact(m) for m in found])

    # The description of mode names the client's default, known only now.
    search_memories.__annotations__["mode"] = mode_type(client.default_mode)

    async def list_memories(user_id: UserId, limit: Limit = None, cursor: Cursor = None) -> str:
        """List the user's memories, newest first; pass nextCursor to get the next page."""
        size = limit or 20
        page = await client.get_all(user_id, limit=size, cursor=cursor)
        next_cursor = page[-1].id if len(page) == size else None
        return _json({"memories": [compact(m) for m in page], "nextCursor": next_cursor})

    async def get_memory(user_id: UserId, id: MemoryId) -> str:
        """One of the user's memories, by id."""
        return _json(compact(await client.get(id, user_id=user_id)))

    async def update_memory(
        user_id: UserId, id: MemoryId, content: Content | None = None, metadata: Metadata = None
    ) -> str:
        """Change a memory's text and/or metadata (metadata is replaced whole)."""
        changes: dict[str, t.Any] = {}
        if content is not None:
            changes["content"] = content
        if metadata is not None:
            changes["metadata"] = metadata
        if not changes:
            raise ToolError("Nothing to update: give content and/or metadata")
        return _json(compact(await client.update(id, user_id=user_id, **changes)))

    async def delete_memory(user_id: UserId, id: MemoryId) -> str:
        """Delete one of the user's memories for good."""
        await client.delete(id, user_id=user_id)
        return _json({"deleted": id})

    async def delete_all_memories(user_id: UserId, confirm: Confirm) -> str:
        """Delete every memory of the user, for good; does nothing unless confirm is true."""
        if confirm is not True:
            return _json({"deleted": 0, "message": "Nothing deleted: confirm must be true"})
        return _json({"deleted": await client.delete_all(user_id)})

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return [
        (add_memory, ToolAnnotations(read_only_hint=False, open_world_hint=False)),
        (search_memories, reads),
        (list_memories, reads),
        (get_memory, reads),
        (update_memory, ToolAnnotations(read_only_hint=False, idempotent_hint=True)),
        (delete_memory, ToolAnnotations(destructive_hint=True, idempotent_hint=True)),
        (delete_all_memories, ToolAnnotations(destructive_hint=True, idempotent_hint=True)),
    ]


def for_user(fn: Tool, user_id: str) -> Tool:
    """``fn`` with its ``user_id`` argument fixed: the tool's schema no longer has it."""
    signature = inspect.signature(fn, eval_str=True)
    parameters = [p for p in signature.parameters.values() if p.name != "user_id"]

    @functools.wraps(fn)
    async def tool(**kwargs: t.Any) -> str:
        return await fn(user_id, **kwargs)

    # The MCP SDK builds the input schema from the signature, which
    # inspect.signature takes from here rather than from the wrapped function.
    tool.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    del tool.__wrapped__  # nothing may find the user_id parameter behind it
    tool.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": str}
    return tool


def build_server(client: AsyncMemsvc, user_id: str | None = None) -> MCPServer:
    """The MCP server: memsvc's tools for ``user_id``, or for each call's ``user_id``."""
    who = f"the end user {user_id!r}" if user_id else "the end user named in each call"
    server: MCPServer = MCPServer(
        "memsvc",
        version=__version__,
        instructions=(
            f"Long-term memory for {who}: search it before answering questions that depend "
            "on what you were told earlier, and add lasting facts and preferences worth "
            "remembering."
        ),
        # The SDK logs each request at INFO; warnings and errors are enough on stderr.
        log_level="WARNING",
    )
    for fn, hints in tools(client):
        fn = _tool_errors(fn)
        if user_id is not None:
            fn = for_user(fn, user_id)
        # Compact JSON text, not also a structured copy of it.
        server.add_tool(fn, annotations=hints, structured_output=False)
    return server


def parse_args(argv: t.Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with the MEMSVC_* variables as defaults."""
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="memsvc-mcp",
        description="memsvc's memories as MCP tools over stdio.",
        epilog="Prefer MEMSVC_API_KEY to --api-key: a command line is visible to other users.",
    )
    parser.add_argument("--url", default=env.get("MEMSVC_URL"), help="server root (MEMSVC_URL)")
    parser.add_argument(
        "--api-key", default=env.get("MEMSVC_API_KEY"), help="API key (MEMSVC_API_KEY)"
    )
    parser.add_argument(
        "--user-id",
        default=env.get("MEMSVC_USER_ID") or None,
        help="the end user every tool acts for (MEMSVC_USER_ID); "
        "without it each tool takes a user_id argument",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per HTTP request")
    parser.add_argument(
        "--default-mode",
        choices=MODES,
        default=DEFAULT_MODE,
        help=f"search mode when the model names none (default: {DEFAULT_MODE})",
    )
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("no memsvc URL: pass --url or set MEMSVC_URL")
    if not args.api_key:
        parser.error("no API key: set MEMSVC_API_KEY or pass --api-key")
    return args


async def serve(args: argparse.Namespace) -> None:
    """Serve MCP on stdin/stdout until the host closes them."""
    async with AsyncMemsvc(
        args.url, api_key=args.api_key, timeout=args.timeout, default_mode=args.default_mode
    ) as client:
        await build_server(client, args.user_id).run_stdio_async()


def main(argv: t.Sequence[str] | None = None) -> None:
    """The ``memsvc-mcp`` command."""
    args = parse_args(argv)
    # httpx logs each request's URL at INFO, and a query's URL holds the
    # memory text searched for: not for the host's log files.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    anyio.run(serve, args)
