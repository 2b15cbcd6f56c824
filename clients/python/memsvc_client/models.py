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
    #: (keyword), their fusion (hybrid).
    score: float

    @classmethod
    def from_wire(cls, data: t.Mapping[str, t.Any]) -> Explain:
        """An Explain from the JSON object of a result's ``explain``."""
        keyword = data["keyword"]
        return cls(
            float(data["cosine"]),
            float(keyword) if keyword is not None else None,
            float(data["score"]),
        )

    def to_dict(self) -> dict[str, t.Any]:
        """The wire's ``explain`` object."""
        return {"cosine": self.cosine, "keyword": self.keyword, "score": self.score}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory:
    """One memory of an end user; ``similarity`` is set on search results only."""

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
        if self.similarity is not None:
            out["similarity"] = self.similarity
        if self.matched_by is not None:
            out["matchedBy"] = list(self.matched_by)
        if self.explain is not None:
            out["explain"] = self.explain.to_dict()
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
