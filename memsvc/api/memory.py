"""The ``memory`` router: a tenant's memories, per end user."""

from __future__ import annotations

import typing as t

from .. import clock
from ..errors import BadRequest
from ..errors import NotFound
from ..models import Moment
from ..models import Selection
from ..observability import audit
from ..services import conversations
from ..services import jobs
from ..services import memories
from ..services import timing
from . import inputs
from . import middleware
from . import outputs
from .procedures import Call
from .procedures import Router

router = Router(
    "memory",
    __name__,
    description="A tenant's memories, per end user (API key).",
    middleware=[middleware.api_key, middleware.limited, middleware.record_use],
)


@router.mutation("add", input=inputs.AddMemoryInput(), output=outputs.MEMORY)
def add(call: Call, params: dict[str, t.Any]) -> t.Any:
    middleware.pay_for_embedding(call, "content", params["content"], call.runtime.embedder)
    return memories.add(
        call.store(),
        call.runtime.embedder,
        call.caller.tenant,
        params["userId"],
        params["content"],
        params["metadata"],
        expires_at=params["expiresAt"],
        dedupe=params["dedupe"],
        occurred_at=params["occurredAt"],
    )


@router.query("search", input=inputs.SearchInput(), output=outputs.SEARCH_RESULTS)
def search(call: Call, params: dict[str, t.Any]) -> t.Any:
    query_embedder = call.runtime.query_embedder(call.caller.tenant)
    middleware.pay_for_embedding(call, "query", params["query"], query_embedder, query=True)
    by_time = timing.ranks_by_time(params["mode"], params["time"])
    now = params["now"] or Moment(clock.now_ms())
    interval = timing.query_time(params["query"], now) if by_time else None
    found = memories.search(
        call.store(),
        query_embedder,
        call.caller.tenant,
        params["userId"],
        params["query"],
        params["limit"],
        memories.threshold_for(
            params["mode"], params["threshold"], call.config["SEARCH_DEFAULT_THRESHOLD"]
        ),
        call.runtime.search_cache,
        filter=params["filter"],
        created_after=params["createdAfter"],
        created_before=params["createdBefore"],
        mode=params["mode"],
        max_filter_bytes=call.config["MAX_FILTER_SCAN_BYTES"],
        selection=selection_of(params),
        interval=interval,
        time_on=by_time,
    )
    contexts = conversations.context_of(
        call.store(), call.caller.tenant, [r.memory for r in found], params["context"]
    )
    return outputs.SearchAnswer(
        found, explain=params["explain"], contexts=contexts, time=interval, by_time=by_time
    )


@router.query("getAll", input=inputs.GetAllInput(), output=outputs.MEMORIES)
def get_all(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.get_all(
        call.store(),
        call.caller.tenant,
        params["userId"],
        params["limit"],
        cursor=params["cursor"],
        filter=params["filter"],
        created_after=params["createdAfter"],
        created_before=params["createdBefore"],
        selection=selection_of(params),
        max_bytes=call.budget,
        max_filter_bytes=call.config["MAX_FILTER_SCAN_BYTES"],
    )


def selection_of(params: dict[str, t.Any]) -> Selection:
    """Which memories a search or listing takes, from its input's kind and time fields."""
    return Selection(
        kinds=params["kinds"],
        occurred_after=params["occurredAfter"],
        occurred_before=params["occurredBefore"],
        as_of=params["asOf"],
        include_superseded=params["includeSuperseded"],
    )


@router.query("users", input=inputs.UsersInput(), output=outputs.END_USERS)
def users(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.users(
        call.store(),
        call.caller.tenant,
        params["limit"],
        cursor=params["cursor"],
        prefix=params["prefix"],
    )


@router.query("getById", input=inputs.MemoryIdInput(), output=outputs.MEMORY, errors=[NotFound])
def get_by_id(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.get(call.store(), call.caller.tenant, params["id"], user_id=params["userId"])


@router.mutation("update", input=inputs.UpdateInput(), output=outputs.MEMORY, errors=[NotFound])
def update(call: Call, params: dict[str, t.Any]) -> t.Any:
    if "content" in params:
        middleware.pay_for_embedding(call, "content", params["content"], call.runtime.embedder)
    return memories.update(
        call.store(),
        call.runtime.embedder,
        call.caller.tenant,
        params["id"],
        user_id=params["userId"],
        content=params.get("content", memories.UNSET),
        metadata=params.get("metadata", memories.UNSET),
        expires_at=params.get("expiresAt", memories.UNSET),
        occurred_at=params.get("occurredAt", memories.UNSET),
    )


@router.query("history", input=inputs.MemoryIdInput(), output=outputs.VERSIONS, errors=[NotFound])
def history(call: Call, params: dict[str, t.Any]) -> t.Any:
    return memories.history(
        call.store(),
        call.caller.tenant,
        params["id"],
        user_id=params["userId"],
        max_bytes=call.budget,
    )


@router.mutation("delete", input=inputs.MemoryIdInput(), output=outputs.SUCCESS, errors=[NotFound])
def delete(call: Call, params: dict[str, t.Any]) -> t.Any:
    memories.delete(call.store(), call.caller.tenant, params["id"], user_id=params["userId"])
    return {"success": True}


@router.mutation("deleteAll", input=inputs.UserInput(), output=outputs.DELETED)
def delete_all(call: Call, params: dict[str, t.Any]) -> t.Any:
    deleted = memories.delete_all(
        call.store(), call.caller.tenant, params["userId"], call.runtime.search_cache
    )
    audit.record(
        "memory.deleteAll", f"key:{call.caller.key.id}", call.caller.tenant, deleted=deleted
    )
    return {"success": True, "deleted": deleted}


@router.mutation("ingest", input=inputs.IngestInput(), output=outputs.INGESTED)
def ingest(call: Call, params: dict[str, t.Any]) -> t.Any:
    extract = _extracts(call, params)
    messages = [
        conversations.Message(m["role"], m["content"], m["name"], m["at"], m["id"])
        for m in params["messages"]
    ]
    middleware.pay_for_embedding_all(
        call, "messages", [m.content for m in messages], call.runtime.embedder
    )
    ingested = conversations.ingest(
        call.store(),
        call.runtime.embedder,
        call.caller.tenant,
        params["userId"],
        messages,
        session_id=params["sessionId"],
        metadata=params["metadata"],
        extract=extract,
    )
    if ingested.job is not None:
        call.runtime.wake_extraction()
    return ingested


def _extracts(call: Call, params: dict[str, t.Any]) -> bool:
    """Whether this ingest queues an extraction job: its ``extract``, else the server's setting."""
    config = call.config
    extract = params["extract"]
    if extract is None:
        return config["EXTRACT"] == "on"
    if extract and config["LLM_URL"] is None:
        raise BadRequest(
            "Invalid input: extract: no language model is configured on this server (its "
            "operator sets MEMSVC_LLM_URL and MEMSVC_LLM_MODEL)"
        )
    if extract:
        chars = sum(len(m["content"]) for m in params["messages"])
        if chars > config["EXTRACT_MAX_CHARS"]:
            raise BadRequest(
                f"Invalid input: messages: {chars:,} characters are more than one call with "
                f"extraction may carry ({config['EXTRACT_MAX_CHARS']:,}, "
                "MEMSVC_EXTRACT_MAX_CHARS); send the conversation in several calls with the "
                "same sessionId"
            )
    return bool(extract)


@router.query("job", input=inputs.IdInput(), output=outputs.JOB, errors=[NotFound])
def job(call: Call, params: dict[str, t.Any]) -> t.Any:
    return jobs.get(call.store(), call.caller.tenant, params["id"])


@router.query("jobs", input=inputs.JobsInput(), output=outputs.JOBS)
def jobs_(call: Call, params: dict[str, t.Any]) -> t.Any:
    return jobs.page(
        call.store(),
        call.caller.tenant,
        params["limit"],
        user_id=params["userId"],
        status=params["status"],
        cursor=params["cursor"],
    )


@router.mutation("retryJob", input=inputs.IdInput(), output=outputs.JOB, errors=[NotFound])
def retry_job(call: Call, params: dict[str, t.Any]) -> t.Any:
    found = jobs.retry(call.store(), call.caller.tenant, params["id"])
    call.runtime.wake_extraction()
    return found


@router.query("sessions", input=inputs.SessionsInput(), output=outputs.SESSIONS)
def sessions(call: Call, params: dict[str, t.Any]) -> t.Any:
    return conversations.sessions(
        call.store(), call.caller.tenant, params["userId"], params["limit"], cursor=params["cursor"]
    )


@router.query("session", input=inputs.SessionInput(), output=outputs.MEMORIES, errors=[NotFound])
def session(call: Call, params: dict[str, t.Any]) -> t.Any:
    return conversations.session(
        call.store(),
        call.caller.tenant,
        params["userId"],
        params["sessionId"],
        params["limit"],
        after=params["after"],
    )
