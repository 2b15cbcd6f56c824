"""The optional extras of memsvc-client, and the error that names the one missing."""

from __future__ import annotations

import typing as t

#: Each extra: the top-level modules it installs, and what to call it.
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "mcp": (("mcp", "mcp_types", "pydantic"), "the MCP SDK"),
    "langchain": (("langchain_core",), "LangChain (langchain-core)"),
    "langgraph": (("langgraph",), "LangGraph"),
    "llamaindex": (("llama_index",), "LlamaIndex (llama-index-core)"),
    "openai-agents": (("agents",), "the OpenAI Agents SDK (openai-agents)"),
}


def message(module: str, extra: str) -> str:
    """What to tell someone who imported ``module`` without ``extra``."""
    _, what = EXTRAS[extra]
    return f"{module} needs {what}: pip install 'memsvc-client[{extra}]'"


def missing(err: ModuleNotFoundError, module: str, extra: str) -> t.NoReturn:
    """Raise an ImportError naming ``extra`` when ``err`` is one of its modules missing.

    Any other missing module (a framework installed without one of its own
    dependencies) is raised as it is.
    """
    modules, _ = EXTRAS[extra]
    if (err.name or "").split(".")[0] not in modules:
        raise err
    raise ImportError(message(module, extra)) from err
