"""The ``memory`` router: a tenant's memories, per end user."""

from __future__ import annotations

import typing as t

from ..services import memories
from . import middleware
from . import schemas
from .context import embedder
from .context import runtime
from .context import store
from .trpc import Call
from .trpc import Router

router = Router(
    "memory", __name__, middleware=[middleware.api_key, middleware.limited, middleware.record_use]
)


@router.mutation("add", input=schemas.AddMemoryInput(), output=schemas.memory_out)
def add(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.add(
        store(),
        embedder(),
        call.caller.tenant,
        params["userId"],
        params["content"],
        params["metadata"],
    )


@router.query("search", input=schemas.SearchInput(), output=schemas.search_results_out)
def search(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.search(
        store(),
        runtime().query_embedder,
        call.caller.tenant,
        params["userId"],
        params["query"],
        params["limit"],
        params["threshold"],
        runtime().search_cache,
    )


@router.query("getAll", input=schemas.GetAllInput(), output=schemas.memories_out)
def get_all(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.get_all(store(), call.caller.tenant, params["userId"], params["limit"])


@router.query("getById", input=schemas.IdInput(), output=schemas.memory_out)
def get_by_id(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.get(store(), call.caller.tenant, params["id"])


@router.mutation("delete", input=schemas.IdInput())
def delete(call: Call, params: dict[str, t.Any]) -> t.Any:
    memories.delete(store(), call.caller.tenant, params["id"])
    return {"success": True}
