"""What calls return: :class:`Memory`, immutable, with Python types."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import typing as t


class Unset(enum.Enum):
    """The type of :data:`UNSET`: an argument not given (``None`` means something else)."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: Marks an argument of :meth:`Memsvc.update` as not given: ``None`` there
#: means "clear it".
UNSET: t.Final = Unset.UNSET


_UTC = datetime.UTC
_fromisoformat = datetime.datetime.fromisoformat


def parse_time(value: str) -> datetime.datetime:
    """A wire timestamp (``2026-11-23T04:08:00.123Z``) as an aware UTC datetime."""
    # fromisoformat reads the trailing Z since Python 3.11, and in C: fast.
    parsed = _fromisoformat(value)
    return parsed if parsed.tzinfo is _UTC else parsed.astimezone(_UTC)


def format_time(value: datetime.datetime) -> str:
    """An aware datetime as the wire's timestamp: UTC, milliseconds, ``Z``."""
    if value.tzinfo is None or value.utcoffset() is None:
        # A naive datetime is ambiguous (local time? UTC?): memsvc refuses
        # timestamps without a zone, and so does the client, before sending.
        raise ValueError("datetimes sent to memsvc must be timezone-aware (e.g. tzinfo=UTC)")
    utc = value.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


@dataclasses.dataclass(frozen=True, slots=True)
class Explain:
    """Why a search result ranked where it did (``search(..., explain=True)``)."""

    #: The cosine similarity of query and memory (equal to ``similarity``).
    cosine: float
    #: The keyword match's strength among the user's memories, in [0, 1];
    #: None when no query word matched (and in semantic mode).
    keyword: float | None
    #: What the mode ranked by: the cosine (semantic), the keyword strength
    #: (keyword), the sum of its parts (hybrid).
    score: float
    #: Hybrid mode: each part of the score by name ("cosine", "keyword",
    #: "neighbours", "session", "speaker", "short", "dates", "time", "newer"...).
    parts: t.Mapping[str, float] | None = None
    #: When the search ranked by time: the time the query names, as
    #: ``{"text", "start", "end"}`` (ISO dates, inclusive); None if it named none.
    time: t.Mapping[str, str] | None = None
    #: Whether the search ranked by time at all (``time`` is then meaningful).
    timed: bool = False

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Explain:
        """An Explain from the JSON object of a result's ``explain``."""
        keyword = data["keyword"]
        parts = data.get("parts")
        return cls(
            float(data["cosine"]),
            float(keyword) if keyword is not None else None,
            float(data["score"]),
            {k: float(v) for k, v in parts.items()} if parts is not None else None,
            dict(data["time"]) if data.get("time") is not None else None,
            "time" in data,
        )

    def to_dict(self) -> dict[str, t.Any]:
        """The wire's ``explain`` object."""
        out: dict[str, t.Any] = {
            "cosine": self.cosine,
            "keyword": self.keyword,
            "score": self.score,
        }
        if self.parts is not None:
            out["parts"] = dict(self.parts)
        if self.timed:
            out["time"] = dict(self.time) if self.time is not None else None
        return out


def format_moment(value: datetime.datetime) -> str:
    """An aware datetime in its own offset, with milliseconds (``2023-05-08T19:30:00.000+02:00``).

    A message's time keeps the offset it was said in: memsvc reckons its
    "yesterday" from that day.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("datetimes sent to memsvc must be timezone-aware (e.g. tzinfo=UTC)")
    return value.isoformat(timespec="milliseconds")


@dataclasses.dataclass(frozen=True, slots=True)
class DateSpan:
    """A time expression found in a memory's text, resolved to calendar dates (inclusive)."""

    text: str
    start: datetime.date
    end: datetime.date

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> DateSpan:
        return cls(
            data["text"],
            datetime.date.fromisoformat(data["start"]),
            datetime.date.fromisoformat(data["end"]),
        )

    def to_dict(self) -> dict[str, t.Any]:
        return {"text": self.text, "start": self.start.isoformat(), "end": self.end.isoformat()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory:
    """One memory of an end user; ``similarity`` is set on search results only.

    Messages (stored by ``ingest``) carry ``kind="message"``, their session,
    role, speaker and position; facts ``kind="fact"`` and their sources. The
    fields a memory does not have are None.
    """

    id: str
    content: str
    user_id: str
    metadata: dict[str, t.Any]
    created_at: datetime.datetime
    updated_at: datetime.datetime
    expires_at: datetime.datetime | None = None
    similarity: float | None = None
    #: How a keyword or hybrid search found it (``("keyword", "semantic")``), else None.
    matched_by: tuple[str, ...] | None = None
    #: Why it ranked where it did: set by a search with ``explain=True``, else None.
    explain: Explain | None = None
    #: "message" or "fact"; None for a memory stored with ``add``.
    kind: str | None = None
    #: When it was said or happened, if not when it was stored.
    occurred_at: datetime.datetime | None = None
    session_id: str | None = None
    role: str | None = None
    speaker: str | None = None
    position: int | None = None
    message_id: str | None = None
    #: The time expressions of its text, resolved.
    dates: tuple[DateSpan, ...] | None = None
    #: A fact's sources (ids of messages), the fact that replaced it and when.
    sources: tuple[str, ...] | None = None
    superseded_by: str | None = None
    valid_to: datetime.datetime | None = None
    #: A search result's neighbouring messages (``search(..., context=n)``).
    context: Context | None = None

    @property
    def time(self) -> datetime.datetime:
        """When it happened: ``occurred_at``, else ``created_at``."""
        return self.created_at if self.occurred_at is None else self.occurred_at

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Memory:
        """A Memory from the JSON object memsvc answers with."""
        created = data["createdAt"]
        updated = data["updatedAt"]
        created_at = parse_time(created)
        expires = data.get("expiresAt")
        matched = data.get("matchedBy")
        explain = data.get("explain")
        similarity = data.get("similarity")
        memory = object.__new__(cls)
        # A frozen dataclass's __init__ sets each field through
        # object.__setattr__, which was most of the client's cost per memory
        # (a getAll of 100 is 100 of them): fill the instance's dict at once.
        memory.__dict__.update(
            id=data["id"],
            content=data["content"],
            user_id=data["userId"],
            metadata=data.get("metadata") or {},
            created_at=created_at,
            # Usually equal to createdAt: parse once.
            updated_at=created_at if updated == created else parse_time(updated),
            expires_at=parse_time(expires) if expires is not None else None,
            # The wire writes a whole number without a point (1, not 1.0).
            similarity=float(similarity) if similarity is not None else None,
            matched_by=tuple(matched) if matched is not None else None,
            explain=Explain.from_wire(explain) if explain is not None else None,
            kind=data.get("kind"),
            occurred_at=_time_or_none(data.get("occurredAt")),
            session_id=data.get("sessionId"),
            role=data.get("role"),
            speaker=data.get("speaker"),
            position=data.get("position"),
            message_id=data.get("messageId"),
            dates=_dates_or_none(data.get("dates")),
            sources=_tuple_or_none(data.get("sources")),
            superseded_by=data.get("supersededBy"),
            valid_to=_time_or_none(data.get("validTo")),
            context=_context_or_none(data.get("context")),
        )
        return memory

    def to_dict(self) -> dict[str, t.Any]:
        """The memory as JSON-ready data in the wire's field names (absent fields left out)."""
        out: dict[str, t.Any] = {
            "id": self.id,
            "content": self.content,
            "userId": self.user_id,
            "metadata": self.metadata,
            "createdAt": format_time(self.created_at),
            "updatedAt": format_time(self.updated_at),
        }
        if self.expires_at is not None:
            out["expiresAt"] = format_time(self.expires_at)
        for name, value in (
            ("kind", self.kind),
            ("occurredAt", None if self.occurred_at is None else format_time(self.occurred_at)),
            ("sessionId", self.session_id),
            ("role", self.role),
            ("speaker", self.speaker),
            ("position", self.position),
            ("messageId", self.message_id),
            ("dates", None if self.dates is None else [d.to_dict() for d in self.dates]),
            ("sources", None if self.sources is None else list(self.sources)),
            ("supersededBy", self.superseded_by),
            ("validTo", None if self.valid_to is None else format_time(self.valid_to)),
        ):
            if value is not None:
                out[name] = value
        if self.similarity is not None:
            out["similarity"] = self.similarity
        if self.matched_by is not None:
            out["matchedBy"] = list(self.matched_by)
        if self.explain is not None:
            out["explain"] = self.explain.to_dict()
        if self.context is not None:
            out["context"] = self.context.to_dict()
        return out


def _time_or_none(value: str | None) -> datetime.datetime | None:
    return None if value is None else parse_time(value)


def _tuple_or_none(value: t.Sequence[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _dates_or_none(value: t.Sequence[t.Mapping[str, t.Any]] | None) -> tuple[DateSpan, ...] | None:
    return None if value is None else tuple(DateSpan.from_wire(d) for d in value)


def _context_or_none(value: t.Mapping[str, t.Any] | None) -> Context | None:
    return None if value is None else Context.from_wire(value)


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    """The messages around a search result, in their session's order."""

    before: tuple[Memory, ...]
    after: tuple[Memory, ...]

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Context:
        return cls(
            tuple(Memory.from_wire(m) for m in data["before"]),
            tuple(Memory.from_wire(m) for m in data["after"]),
        )

    def to_dict(self) -> dict[str, t.Any]:
        return {
            "before": [m.to_dict() for m in self.before],
            "after": [m.to_dict() for m in self.after],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """One conversation of an end user (``sessions()``)."""

    session_id: str
    #: Its messages now (expired ones not counted).
    messages: int
    #: The earliest and the latest of its messages' times.
    first_at: datetime.datetime
    last_at: datetime.datetime

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Session:
        return cls(
            data["sessionId"],
            int(data["messages"]),
            parse_time(data["firstAt"]),
            parse_time(data["lastAt"]),
        )

    def to_dict(self) -> dict[str, t.Any]:
        return {
            "sessionId": self.session_id,
            "messages": self.messages,
            "firstAt": format_time(self.first_at),
            "lastAt": format_time(self.last_at),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Ingested:
    """What ``ingest`` did: the session, one memory per message in order, how many of the
    messages the session already held (by id), and the extraction job it queued, if any."""

    session_id: str
    memories: tuple[Memory, ...]
    duplicates: int
    #: With extraction: the job drawing facts from the new messages (with
    #: ``wait=True``, as it settled); None without, or when no message was new.
    job: Job | None = None

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Ingested:
        job = data.get("job")
        return cls(
            data["sessionId"],
            tuple(Memory.from_wire(m) for m in data["memories"]),
            int(data["duplicates"]),
            Job.from_wire(job) if job is not None else None,
        )


#: A job's status: waiting, calling the model, its facts applied, given up.
JobStatus = t.Literal["queued", "running", "done", "failed"]


@dataclasses.dataclass(frozen=True, slots=True)
class JobFacts:
    """What a ``done`` job did to the user's facts."""

    #: Ids of the facts it added.
    added: tuple[str, ...]
    #: Ids of the facts they replaced (now superseded).
    superseded: tuple[str, ...]
    #: How many of the model's facts the user already had.
    unchanged: int


@dataclasses.dataclass(frozen=True, slots=True)
class JobUsage:
    """The model tokens a job's calls took, every attempt together."""

    prompt_tokens: int
    completion_tokens: int


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """An extraction job: facts drawn from an ``ingest``'s messages by the server's model."""

    id: str
    user_id: str
    status: JobStatus
    #: Times it was run (each model call; a run whose worker stopped mid-call too).
    attempts: int
    created_at: datetime.datetime
    updated_at: datetime.datetime
    #: The session of its messages.
    session_id: str | None = None
    #: Why it failed, or why it waits.
    error: str | None = None
    #: When ``done``: the facts it added and superseded.
    facts: JobFacts | None = None
    #: Once it has called the model.
    usage: JobUsage | None = None

    @property
    def settled(self) -> bool:
        """Whether it is ``done`` or ``failed``: it changes no more unless retried."""
        return self.status in ("done", "failed")

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Job:
        """A Job from the JSON object memsvc answers with."""
        facts = data.get("facts")
        usage = data.get("usage")
        return cls(
            id=data["id"],
            user_id=data["userId"],
            status=data["status"],
            attempts=int(data["attempts"]),
            created_at=parse_time(data["createdAt"]),
            updated_at=parse_time(data["updatedAt"]),
            session_id=data.get("sessionId"),
            error=data.get("error"),
            facts=None
            if facts is None
            else JobFacts(
                tuple(facts["added"]), tuple(facts["superseded"]), int(facts["unchanged"])
            ),
            usage=None
            if usage is None
            else JobUsage(int(usage["promptTokens"]), int(usage["completionTokens"])),
        )

    def to_dict(self) -> dict[str, t.Any]:
        """The job in the wire's field names (absent fields left out)."""
        out: dict[str, t.Any] = {"id": self.id, "userId": self.user_id}
        if self.session_id is not None:
            out["sessionId"] = self.session_id
        out.update(
            status=self.status,
            attempts=self.attempts,
            createdAt=format_time(self.created_at),
            updatedAt=format_time(self.updated_at),
        )
        if self.error is not None:
            out["error"] = self.error
        if self.facts is not None:
            out["facts"] = {
                "added": list(self.facts.added),
                "superseded": list(self.facts.superseded),
                "unchanged": self.facts.unchanged,
            }
        if self.usage is not None:
            out["usage"] = {
                "promptTokens": self.usage.prompt_tokens,
                "completionTokens": self.usage.completion_tokens,
            }
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class EndUser:
    """An end user of the key's tenant who has memories (``users()``)."""

    user_id: str
    #: Their memories now (expired ones not counted).
    memories: int
    #: When any of their memories was last added or updated.
    last_write_at: datetime.datetime

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> EndUser:
        """An EndUser from the JSON object memory.users lists."""
        return cls(data["userId"], int(data["memories"]), parse_time(data["lastWriteAt"]))

    def to_dict(self) -> dict[str, t.Any]:
        """The end user in the wire's field names."""
        return {
            "userId": self.user_id,
            "memories": self.memories,
            "lastWriteAt": format_time(self.last_write_at),
        }
