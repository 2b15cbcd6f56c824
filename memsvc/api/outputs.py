"""What procedures answer: each output's JSON Schema, by component, and its serialiser.

Records are written by their :mod:`memsvc.wire` shapes, whose field order is
the wire order; answers are built by hand rather than dumped through
marshmallow, which was several times slower on a search answer or a page of
100 memories.
"""

from __future__ import annotations

import dataclasses
import operator
import typing as t

from .. import wire
from ..models import ApiKey
from ..models import CreatedKey
from ..models import DateSpan
from ..models import EndUser
from ..models import ScoredMemory
from ..models import Session
from ..services.conversations import Context
from ..services.conversations import Ingested
from ..wire import TIMESTAMP
from ..wire import UUID
from ..wire import Field
from ..wire import Shape
from ..wire import object_schema
from .procedures import Component
from .procedures import Output

_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}


# -- memories ----------------------------------------------------------------


MEMORY_COMPONENT = Component.of(wire.MEMORY)
MEMORY = Output.one(MEMORY_COMPONENT, wire.MEMORY.json, wire.memory_text)
MEMORIES = Output.list_of(MEMORY_COMPONENT, wire.MEMORY.json, wire.memory_text)
VERSIONS = Output.list_of(Component.of(wire.VERSION), wire.VERSION.json)


_END_USER = Shape[EndUser](
    "EndUser",
    (
        Field("userId", {"type": "string"}, operator.attrgetter("user_id")),
        Field(
            "memories",
            {"type": "integer", "minimum": 1, "description": "Visible memories (not expired)."},
            operator.attrgetter("memories"),
        ),
        Field(
            "lastWriteAt",
            {**TIMESTAMP, "description": "The newest add or update of any of their memories."},
            lambda u: wire.timestamp(u.last_write_at),
        ),
    ),
)
END_USERS = Output.list_of(Component.of(_END_USER), _END_USER.json)


_SESSION = Shape[Session](
    "Session",
    (
        Field("sessionId", {"type": "string"}, operator.attrgetter("session_id")),
        Field(
            "messages",
            {"type": "integer", "minimum": 1, "description": "Visible messages (not expired)."},
            operator.attrgetter("messages"),
        ),
        Field(
            "firstAt",
            {**TIMESTAMP, "description": "The earliest of its messages' times."},
            lambda s: wire.timestamp(s.first_at),
        ),
        Field(
            "lastAt",
            {**TIMESTAMP, "description": "The latest of its messages' times."},
            lambda s: wire.timestamp(s.last_at),
        ),
    ),
)
SESSIONS = Output.list_of(Component.of(_SESSION), _SESSION.json)


JOB_COMPONENT = Component.of(wire.JOB)
JOB = Output.one(JOB_COMPONENT, wire.JOB.json)
JOBS = Output.list_of(JOB_COMPONENT, wire.JOB.json)


def _ingested_json(r: Ingested) -> dict[str, t.Any]:
    out = {
        "sessionId": r.session_id,
        "memories": [wire.MEMORY.json(m) for m in r.memories],
        "duplicates": r.duplicates,
    }
    if r.job is not None:
        out["job"] = wire.JOB.json(r.job)
    return out


def _ingested_text(result: Ingested) -> str:
    job = "" if result.job is None else f',"job":{wire.encode(wire.JOB.json(result.job))}'
    return (
        f'{{"sessionId":{wire.encode(result.session_id)},"memories":'
        f"{wire.list_text(map(wire.memory_text, result.memories))},"
        f'"duplicates":{result.duplicates}{job}}}'
    )


_INGEST_RESULT = Component(
    "IngestResult",
    object_schema(
        {
            "sessionId": {"type": "string", "description": "The session the messages are in."},
            "memories": {
                "type": "array",
                "items": MEMORY_COMPONENT.ref,
                "description": "One memory per message, in the order given (a message "
                "already stored: the memory stored for it then).",
            },
            "duplicates": {
                "type": "integer",
                "minimum": 0,
                "description": "How many messages the session already held (by id).",
            },
            # With extraction: the job queued to draw facts from the new messages.
            "job": JOB_COMPONENT.ref,
        },
        ["sessionId", "memories", "duplicates"],
    ),
)
INGESTED = Output(
    _INGEST_RESULT.ref,
    (_INGEST_RESULT, MEMORY_COMPONENT, JOB_COMPONENT),
    _INGEST_RESULT.name,
    _ingested_json,
    _ingested_text,
)


@dataclasses.dataclass(frozen=True)
class SearchAnswer:
    """What memory.search found, and whether the caller asked why."""

    results: list[ScoredMemory]
    explain: bool = False
    #: The messages around each result that is a message, by its id (search's ``context``).
    contexts: dict[str, Context] = dataclasses.field(default_factory=dict)
    #: Whether the search ranked by the time its query names, and that time (None: none).
    by_time: bool = False
    time: DateSpan | None = None


def _explain(answer: SearchAnswer, r: ScoredMemory) -> dict[str, t.Any]:
    out: dict[str, t.Any] = {
        "cosine": _number(r.similarity),
        "keyword": None if r.keyword is None else _number(r.keyword),
        "score": _number(r.similarity if r.score is None else r.score),
    }
    if r.parts is not None:
        out["parts"] = {name: _number(float(value)) for name, value in r.parts.items()}
    if answer.by_time:
        span = answer.time
        out["time"] = (
            None if span is None else {"text": span.text, "start": span.start, "end": span.end}
        )
    return out


def _number(value: float) -> float | int:
    # JSON.stringify writes 1, not 1.0; match it for whole numbers.
    return int(value) if value.is_integer() else value


def search_results(answer: SearchAnswer) -> list[dict[str, t.Any]]:
    out = []
    for r in answer.results:
        item = wire.MEMORY.json(r.memory)
        item["similarity"] = _number(r.similarity)
        if r.matched_by is not None:
            item["matchedBy"] = list(r.matched_by)
        if answer.explain:
            item["explain"] = _explain(answer, r)
        context = answer.contexts.get(r.memory.id)
        if context is not None:
            item["context"] = {
                "before": [wire.MEMORY.json(m) for m in context.before],
                "after": [wire.MEMORY.json(m) for m in context.after],
            }
        out.append(item)
    return out


def search_results_text(answer: SearchAnswer) -> str:
    """``wire.encode(search_results(answer))``, from each memory's kept text."""
    number = wire.number_text
    out = []
    for r in answer.results:
        text = wire.memory_text(r.memory)[:-1] + ',"similarity":' + number(_number(r.similarity))
        if r.matched_by is not None:
            text += ',"matchedBy":' + wire.encode(list(r.matched_by))
        if answer.explain:
            text += ',"explain":' + wire.encode(_explain(answer, r))
        context = answer.contexts.get(r.memory.id)
        if context is not None:
            text += (
                f',"context":{{"before":{wire.list_text(map(wire.memory_text, context.before))},'
                f'"after":{wire.list_text(map(wire.memory_text, context.after))}}}'
            )
        out.append(text + "}")
    return wire.list_text(out)


_SEARCH_RESULT = Component(
    "SearchResult",
    object_schema(
        {
            **wire.MEMORY.properties(),
            "similarity": {
                **_FRACTION,
                "description": "Cosine similarity of the query and the memory, clamped "
                "into [0, 1].",
            },
            "matchedBy": {
                "type": "array",
                "items": {"type": "string", "enum": ["keyword", "semantic"]},
                "description": "Which searches found it (keyword and hybrid modes).",
            },
            "explain": object_schema(
                {
                    "cosine": {
                        **_FRACTION,
                        "description": "The cosine similarity (equal to similarity).",
                    },
                    "keyword": {
                        "type": ["number", "null"],
                        "minimum": 0,
                        "maximum": 1,
                        "description": "The keyword match's strength in [0, 1]: the "
                        "share of the query's words, each weighted by its rarity among "
                        "the user's own memories, that the memory holds; null when no "
                        "query word matched (and in semantic mode).",
                    },
                    "score": {
                        "type": "number",
                        "description": "What the mode ranked by: the cosine (semantic), "
                        "the BM25 score (keyword), the sum of the parts (hybrid).",
                    },
                    "parts": {
                        "type": "object",
                        "additionalProperties": {"type": "number"},
                        "description": "Hybrid mode: the named parts the score adds up: "
                        "cosine, keyword, and where they apply cosineWithoutNames, "
                        "neighbours, session, speaker, short, dates, time, recency, newer "
                        "(docs/api.md, hybrid ranking).",
                    },
                    "time": {
                        "oneOf": [
                            {"type": "null"},
                            object_schema(
                                {
                                    "text": {"type": "string"},
                                    "start": {"type": "string", "format": "date"},
                                    "end": {"type": "string", "format": "date"},
                                },
                                ["text", "start", "end"],
                            ),
                        ],
                        "description": "When the search ranked by the time its query "
                        "names: that time as written and its dates (inclusive), or null "
                        "if the query names none.",
                    },
                },
                ["cosine", "keyword", "score"],
                description="Why it ranked where it did; only with explain: true.",
            ),
            "context": object_schema(
                {
                    "before": {"type": "array", "items": MEMORY_COMPONENT.ref},
                    "after": {"type": "array", "items": MEMORY_COMPONENT.ref},
                },
                ["before", "after"],
                description="With context > 0, on a result that is a message: up to that many "
                "messages of its session before and after it, in position order.",
            ),
        },
        (*wire.MEMORY.required(), "similarity"),
    ),
)
SEARCH_RESULTS = Output(
    {"type": "array", "items": _SEARCH_RESULT.ref},
    (_SEARCH_RESULT, MEMORY_COMPONENT),
    f"list of {_SEARCH_RESULT.name}",
    search_results,
    search_results_text,
)

_SUCCESS = {"type": "boolean", "const": True}
SUCCESS = Output.one(Component("Success", object_schema({"success": _SUCCESS}, ["success"])))
DELETED = Output.one(
    Component(
        "DeleteAllResult",
        object_schema(
            {"success": _SUCCESS, "deleted": {"type": "integer", "minimum": 0}},
            ["success", "deleted"],
        ),
    )
)


# -- API keys ----------------------------------------------------------------


_NULLABLE_TIMESTAMP = {**TIMESTAMP, "type": ["string", "null"]}
_KEY_RECORD_ID = {**UUID, "description": "The key record's id, which keys.revoke takes."}
_TENANT = {"type": "string", "description": "The tenant."}
_KEY_IDENTIFIER = {"type": "string", "pattern": "^key_[0-9a-f]{16}$"}

_API_KEY = Shape[ApiKey](
    "ApiKey",
    (
        Field("id", _KEY_RECORD_ID, operator.attrgetter("id")),
        Field("idpUserId", _TENANT, operator.attrgetter("tenant")),
        Field("idpKeyId", _KEY_IDENTIFIER, operator.attrgetter("key_id")),
        Field("name", {"type": "string"}, operator.attrgetter("name")),
        Field("lastUsedAt", _NULLABLE_TIMESTAMP, lambda k: wire.timestamp(k.last_used_at)),
        Field("createdAt", TIMESTAMP, lambda k: wire.timestamp(k.created_at)),
        Field("revokedAt", _NULLABLE_TIMESTAMP, lambda k: wire.timestamp(k.revoked_at)),
        Field(
            "rateLimit",
            {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": "Calls per minute this key may make (0: unlimited); null: the "
                "server's setting, which service.info reports.",
            },
            operator.attrgetter("per_minute"),
        ),
        Field(
            "concurrencyLimit",
            {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": "Calls of this key executing at once (0: unlimited); null: the "
                "server's setting.",
            },
            operator.attrgetter("concurrent"),
        ),
    ),
)
KEYS = Output.list_of(Component.of(_API_KEY), _API_KEY.json)
KEY = Output.one(Component.of(_API_KEY), _API_KEY.json)

_CREATED_KEY = Shape[CreatedKey](
    "CreatedKey",
    (
        Field("id", _KEY_RECORD_ID, lambda c: c.key.id),
        Field("idpUserId", _TENANT, lambda c: c.key.tenant),
        Field("idpKeyId", _KEY_IDENTIFIER, lambda c: c.key.key_id),
        Field("name", {"type": "string"}, lambda c: c.key.name),
        Field(
            "secret",
            {
                "type": "string",
                "pattern": "^sk_[a-z0-9]+_[0-9a-f]{64}$",
                "description": "Shown in this answer only, never again.",
            },
            operator.attrgetter("secret"),
        ),
        Field("createdAt", TIMESTAMP, lambda c: wire.timestamp(c.key.created_at)),
    ),
)
CREATED_KEY = Output.one(Component.of(_CREATED_KEY), _CREATED_KEY.json)


# -- the service -------------------------------------------------------------


_UNLIMITED = {"type": "integer", "minimum": 0, "description": "0: none."}

#: What :func:`memsvc.services.info.describe` returns.
SERVICE_INFO = Output.one(
    Component(
        "ServiceInfo",
        object_schema(
            {
                "version": {"type": "string"},
                "embedder": object_schema(
                    {
                        "model": {"type": "string"},
                        "dimensions": {"type": "integer", "minimum": 1},
                        "maxTokens": {"type": ["integer", "null"]},
                        "recommendedThreshold": {**_FRACTION, "type": ["number", "null"]},
                    },
                    ["model", "dimensions", "maxTokens", "recommendedThreshold"],
                ),
                "defaults": object_schema(
                    {"threshold": _FRACTION, "limit": {"type": "integer", "minimum": 1}},
                    ["threshold", "limit"],
                ),
                "limits": object_schema(
                    {"perMinute": _UNLIMITED, "concurrent": _UNLIMITED},
                    ["perMinute", "concurrent"],
                    description="The calling key's limits, its own overrides included.",
                ),
            },
            ["version", "embedder", "defaults", "limits"],
        ),
    )
)
