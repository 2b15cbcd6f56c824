"""The JSON shapes of memsvc's records, each declared once: fields, JSON Schema, conversion.

A :class:`Shape` lists a record's fields in the order they are written. Each
field has its name on the wire, the JSON Schema of its value and how a
record's value becomes that JSON. The API's answers (:mod:`memsvc.api.outputs`),
the OpenAPI document's components and the lines of ``memsvc export``
(:mod:`memsvc.services.transfer`) all come from these declarations, so a
field added here appears in each of them, or a test says where it is missing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import typing as t
import weakref

from . import clock
from .models import JOB_STATUSES
from .models import DateSpan
from .models import Job
from .models import Memory
from .models import Version

Json = dict[str, t.Any]
R = t.TypeVar("R")

TIMESTAMP: Json = {
    "type": "string",
    "format": "date-time",
    "description": "UTC with milliseconds, as JavaScript's toISOString writes it.",
    "examples": ["2026-11-23T04:08:00.123Z"],
}
UUID: Json = {"type": "string", "format": "uuid"}
METADATA: Json = {"type": "object", "additionalProperties": True}


def object_schema(properties: Json, required: t.Sequence[str] = (), **extra: t.Any) -> Json:
    """The JSON Schema of an answer's object with these properties.

    No ``additionalProperties``: a later memsvc may add fields to an answer,
    and a client generated from today's document must take them (docs/api.md,
    Compatibility). The tests hold today's answers to exactly these fields
    (tests/support/openapi.py, ``closed``).
    """
    out: Json = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    out.update(extra)
    return out


@dataclasses.dataclass(frozen=True)
class Field(t.Generic[R]):
    """One field of a shape."""

    #: Its name in the JSON object.
    name: str
    #: The JSON Schema of its value.
    schema: Json
    #: Its JSON value for a record.
    value: t.Callable[[R], t.Any]
    #: Left out of the object when its value is None; otherwise always there.
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class Shape(t.Generic[R]):
    """A record as a JSON object: its name (the OpenAPI component's) and its fields, in order."""

    name: str
    fields: tuple[Field[R], ...]

    def json(self, record: R) -> dict[str, t.Any]:
        """The record as sent: every field in order, an optional one only when it has a value."""
        out = {}
        for field in self.fields:
            value = field.value(record)
            if value is not None or not field.optional:
                out[field.name] = value
        return out

    def values(self, record: R) -> dict[str, t.Any]:
        """Every field's JSON value by name, None for an optional one without a value."""
        return {field.name: field.value(record) for field in self.fields}

    def properties(self) -> Json:
        return {field.name: field.schema for field in self.fields}

    def required(self) -> list[str]:
        return [field.name for field in self.fields if not field.optional]

    def schema(self) -> Json:
        """The JSON Schema of :meth:`json`'s objects."""
        return object_schema(self.properties(), self.required())


# A memory's updatedAt is its createdAt until it is updated, and a page of
# memories often shares timestamps: each is formatted once.
_iso = functools.lru_cache(maxsize=1024)(clock.iso)


def timestamp(ms: int | None) -> str | None:
    """Epoch milliseconds as the wire shows them (:data:`TIMESTAMP`); None stays None."""
    return None if ms is None else _iso(ms)


MEMORY: Shape[Memory] = Shape(
    "Memory",
    (
        Field("id", UUID, operator.attrgetter("id")),
        Field("content", {"type": "string"}, operator.attrgetter("content")),
        Field(
            "userId",
            {"type": "string", "description": "The end user, as given."},
            operator.attrgetter("user_id"),
        ),
        Field(
            "idpUserId",
            {"type": "string", "description": "The tenant that owns it."},
            operator.attrgetter("tenant"),
        ),
        Field("metadata", METADATA, operator.attrgetter("metadata")),
        Field("createdAt", TIMESTAMP, lambda m: _iso(m.created_at)),
        Field("updatedAt", TIMESTAMP, lambda m: _iso(m.updated_at)),
        Field(
            "expiresAt",
            {**TIMESTAMP, "description": "When it vanishes; absent when never."},
            lambda m: timestamp(m.expires_at),
            optional=True,
        ),
        # The fields below are there only when set: an application that never
        # ingests conversations sees none of them.
        Field(
            "kind",
            {
                "type": "string",
                "enum": ["message", "fact"],
                "description": '"message" (stored by memory.ingest) or "fact" (drawn from '
                "messages by extraction); absent on a memory added with memory.add.",
            },
            operator.attrgetter("kind"),
            optional=True,
        ),
        Field(
            "occurredAt",
            {
                **TIMESTAMP,
                "description": "When it was said or happened; absent: its time is createdAt.",
            },
            lambda m: timestamp(m.occurred_at),
            optional=True,
        ),
        Field(
            "sessionId",
            {"type": "string", "description": "A message's session."},
            operator.attrgetter("session_id"),
            optional=True,
        ),
        Field(
            "role",
            {"type": "string", "enum": ["user", "assistant", "system", "tool"]},
            operator.attrgetter("role"),
            optional=True,
        ),
        Field(
            "speaker",
            {"type": "string", "description": "Who said a message (its name), when given."},
            operator.attrgetter("speaker"),
            optional=True,
        ),
        Field(
            "position",
            {
                "type": "integer",
                "minimum": 0,
                "description": "A message's place in its session: 0, 1, 2... in the order "
                "received.",
            },
            operator.attrgetter("position"),
            optional=True,
        ),
        Field(
            "messageId",
            {"type": "string", "description": "Your id of a message, when given."},
            operator.attrgetter("message_id"),
            optional=True,
        ),
        Field(
            "dates",
            {
                "type": "array",
                "items": object_schema(
                    {
                        "text": {"type": "string"},
                        "start": {"type": "string", "format": "date"},
                        "end": {"type": "string", "format": "date"},
                    },
                    ["text", "start", "end"],
                ),
                "description": "The time expressions of its text ('yesterday', 'last May'), "
                "resolved against its time as calendar dates (inclusive).",
            },
            lambda m: _dates(m.dates),
            optional=True,
        ),
        Field(
            "sources",
            {
                "type": "array",
                "items": UUID,
                "description": "A fact's sources: the ids of the messages it was drawn from.",
            },
            lambda m: None if m.sources is None else list(m.sources),
            optional=True,
        ),
        Field(
            "supersededBy",
            {**UUID, "description": "The id of the fact that replaced this one."},
            operator.attrgetter("superseded_by"),
            optional=True,
        ),
        Field(
            "validTo",
            {**TIMESTAMP, "description": "When a superseded fact stopped being current."},
            lambda m: timestamp(m.valid_to),
            optional=True,
        ),
    ),
)


def _dates(dates: t.Sequence[DateSpan] | None) -> list[Json] | None:
    if not dates:
        return None
    return [{"text": d.text, "start": d.start, "end": d.end} for d in dates]


#: One version of a memory, as ``memory.history`` lists them and export files hold them.
VERSION: Shape[Version] = Shape(
    "MemoryVersion",
    (
        Field("version", {"type": "integer", "minimum": 1}, operator.attrgetter("version")),
        Field("content", {"type": "string"}, operator.attrgetter("content")),
        Field("metadata", METADATA, operator.attrgetter("metadata")),
        Field(
            "event",
            {
                "type": "string",
                "enum": ["add", "update", "supersede"],
                "description": "What made this version: an add, an update, or a newer fact "
                "replacing this one (supersede: it gained validTo and supersededBy).",
            },
            operator.attrgetter("event"),
        ),
        Field("at", TIMESTAMP, lambda v: _iso(v.at)),
    ),
)


_FACT_IDS: Json = {"type": "array", "items": UUID}
JOB: Shape[Job] = Shape(
    "Job",
    (
        Field("id", UUID, operator.attrgetter("id")),
        Field("userId", {"type": "string"}, operator.attrgetter("user_id")),
        Field(
            "sessionId",
            {"type": "string", "description": "The session of its messages."},
            operator.attrgetter("session_id"),
            optional=True,
        ),
        Field(
            "status",
            {
                "type": "string",
                "enum": list(JOB_STATUSES),
                "description": "queued: waiting to run (see error for why, when it waits); "
                "running: its model call is in flight; done: its facts are applied; failed: "
                "given up after its attempts, nothing of it applied (memory.retryJob).",
            },
            operator.attrgetter("status"),
        ),
        Field(
            "attempts",
            {
                "type": "integer",
                "minimum": 0,
                "description": "Times it was run (each model call; a run whose worker "
                "stopped mid-call counts too).",
            },
            operator.attrgetter("attempts"),
        ),
        Field("createdAt", TIMESTAMP, lambda j: _iso(j.created_at)),
        Field("updatedAt", TIMESTAMP, lambda j: _iso(j.updated_at)),
        Field(
            "error",
            {"type": "string", "description": "Why it failed, or why it waits."},
            operator.attrgetter("error"),
            optional=True,
        ),
        Field(
            "facts",
            {
                "type": "object",
                "properties": {
                    "added": _FACT_IDS,
                    "superseded": _FACT_IDS,
                    "unchanged": {"type": "integer", "minimum": 0},
                },
                "required": ["added", "superseded", "unchanged"],
                "description": "Done: the facts it added, those they superseded, and how many "
                "of the model's facts the user already had.",
            },
            operator.attrgetter("facts"),
            optional=True,
        ),
        Field(
            "usage",
            {
                "type": "object",
                "properties": {
                    "promptTokens": {"type": "integer", "minimum": 0},
                    "completionTokens": {"type": "integer", "minimum": 0},
                },
                "required": ["promptTokens", "completionTokens"],
                "description": "The model tokens its calls took, all attempts together.",
            },
            lambda j: (
                {"promptTokens": j.prompt_tokens, "completionTokens": j.completion_tokens}
                if j.attempts
                else None
            ),
            optional=True,
        ),
    ),
)


#: JSON text as memsvc answers it: compact, UTF-8 as is, no NaN or Infinity.
#: One encoder for every answer (json.dumps with options builds a new one per call).
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
encode = ENCODER.encode

#: Texts of memories by id(), each dropped when its memory object goes.
_TEXTS: dict[int, tuple[weakref.ref[Memory], str]] = {}


def memory_text(memory: Memory) -> str:
    """``encode(MEMORY.json(memory))``, written once per memory object.

    A search answers with memories its user's snapshot keeps
    (:class:`memsvc.search.records.Records`), the same objects search after
    search: their JSON is kept with them, and goes when they do.
    """
    key = id(memory)
    kept = _TEXTS.get(key)
    if kept is not None and kept[0]() is memory:
        return kept[1]
    text = encode(MEMORY.json(memory))
    _TEXTS[key] = (weakref.ref(memory, functools.partial(_forget, key)), text)
    return text


def _forget(key: int, _gone: weakref.ref[Memory]) -> None:
    # The object with this id is gone; a new one with the same id may
    # already have its own entry (then it holds a live reference: keep it).
    kept = _TEXTS.get(key)
    if kept is not None and kept[0]() is None:
        _TEXTS.pop(key, None)


def number_text(value: float | int) -> str:
    """A JSON number as :data:`ENCODER` writes it."""
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float and value - value == 0:  # finite
        return float.__repr__(value)
    return encode(value)  # raises as the encoder does for NaN and infinities


def list_text(texts: t.Iterable[str]) -> str:
    """A JSON array of these values' JSON texts."""
    return "[" + ",".join(texts) + "]"
