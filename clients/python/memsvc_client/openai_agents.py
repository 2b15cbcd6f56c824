"""memsvc for the OpenAI Agents SDK: :func:`memory_tools`, an end user's memories as tools.

``pip install 'memsvc-client[openai-agents]'``. The tools are the SDK's own
``FunctionTool``s, made with ``function_tool`` from typed functions whose
docstrings the model reads, over memsvc's own client::

    agent = Agent(name="Assistant", tools=memory_tools(memsvc, "alice"))

The end user is the application's choice, fixed when the tools are made:
the model chooses what to search for and what to remember, never whose.
"""

from __future__ import annotations

import asyncio
import functools
import typing as t

from ._core import Mode
from ._extras import missing
from ._tools import compact
from ._tools import dumps
from .aio import AsyncMemsvc
from .client import Memsvc
from .errors import MemsvcError
from .models import Memory

try:
    from agents import FunctionTool
    from agents import RunContextWrapper
    from agents import default_tool_error_function
    from agents import function_tool
except ModuleNotFoundError as e:
    missing(e, __name__, "openai-agents")

__all__ = ["memory_tools"]


def tool_error(context: RunContextWrapper[t.Any], error: Exception) -> str:
    """What the model reads when a tool failed: memsvc's message and code, for it to act on.

    memsvc's messages name the field and the rule (``content: must not be
    empty``) and never hold a secret. Any other error gets the SDK's own
    answer, which says nothing of it.
    """
    if isinstance(error, MemsvcError):
        return f"{error.message} ({error.code})"
    return default_tool_error_function(context, error)


def memory_tools(
    client: Memsvc | AsyncMemsvc,
    user_id: str,
    *,
    limit: int = 5,
    mode: Mode | None = None,
    threshold: float | None = None,
    filter: t.Mapping[str, t.Any] | None = None,
    metadata: t.Mapping[str, t.Any] | None = None,
) -> list[FunctionTool]:
    """``search_memories`` and ``add_memory`` for one end user, for ``Agent(tools=...)``.

    With an :class:`AsyncMemsvc` the tools await it; a :class:`Memsvc` is
    called in a worker thread. ``limit``, ``mode``,
    ``threshold`` and ``filter`` are those of every search (None: the
    client's defaults); ``metadata`` is stored with every memory added.
    Both answer the model with compact JSON text (the MCP server's); a
    failed call answers with memsvc's message and code (:func:`tool_error`).
    """

    async def found(query: str) -> list[Memory]:
        if isinstance(client, AsyncMemsvc):
            return await client.search(
                user_id, query, limit=limit, mode=mode, threshold=threshold, filter=filter
            )
        sync = functools.partial(
            client.search,
            user_id,
            query,
            limit=limit,
            mode=mode,
            threshold=threshold,
            filter=filter,
        )
        return await asyncio.to_thread(sync)

    async def added(content: str) -> Memory:
        # dedupe: a fact the model states twice is stored once, and the
        # client may send the add again when its answer was lost.
        if isinstance(client, AsyncMemsvc):
            return await client.add(user_id, content, metadata=metadata, dedupe=True)
        sync = functools.partial(client.add, user_id, content, metadata=metadata, dedupe=True)
        return await asyncio.to_thread(sync)

    async def search_memories(query: str) -> str:
        """Search what you remember about the user, best match first.

        Use it before answering anything that may depend on what the user told
        you earlier: their preferences, plans, people and facts.

        Args:
            query: What to look for, in natural language: a question or a topic.
        """
        return dumps([compact(m) for m in await found(query)])

    async def add_memory(content: str) -> str:
        """Remember something lasting about the user: a fact, a preference, a plan.

        Args:
            content: One self-contained statement, e.g. "Maya is allergic to peanuts".
        """
        return dumps(compact(await added(content)))

    return [
        function_tool(search_memories, failure_error_function=tool_error),
        function_tool(add_memory, failure_error_function=tool_error),
    ]
