"""The records memsvc keeps, as plain values shared by services and the store."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing as t


# A weak reference slot: the API's JSON of a memory is kept for as long as
# the memory object lives (memsvc.wire.memory_text), and no longer.
@dataclasses.dataclass(frozen=True, slots=True, weakref_slot=True)
class Memory:
    id: str
    tenant: str
    user_id: str
    content: str
    metadata: dict[str, t.Any]
    created_at: int  # epoch milliseconds
    updated_at: int
    #: When it vanishes (epoch ms); None: never.
    expires_at: int | None = None
    #: 1 when added, one more with every update.
    version: int = 1
    #: "message" (memory.ingest) or "fact" (extraction); None: an ordinary memory.
    kind: str | None = None
    #: When it was said or happened (epoch ms); None: its time is ``created_at``.
    occurred_at: int | None = None
    #: The UTC offset (minutes) its time was given in: where "yesterday" is
    #: reckoned. None: UTC.
    offset: int | None = None
    #: A message's session, role, speaker, place in the session and the caller's id of it.
    session_id: str | None = None
    role: str | None = None
    speaker: str | None = None
    position: int | None = None
    message_id: str | None = None
    #: The time expressions of its text, resolved against its time; None: none found.
    dates: tuple[DateSpan, ...] | None = None
    #: A fact's sources (memory ids of the messages it was drawn from).
    sources: tuple[str, ...] | None = None
    #: The fact that replaced this one, and when this one stopped being current (epoch ms).
    superseded_by: str | None = None
    valid_to: int | None = None

    @property
    def time(self) -> int:
        """When it happened: ``occurred_at``, else ``created_at``."""
        return self.created_at if self.occurred_at is None else self.occurred_at


class Moment(t.NamedTuple):
    """A time as given: epoch milliseconds, and the UTC offset (minutes) it was written in."""

    ms: int
    #: None: given in UTC, or not given at all (the time of a call).
    offset: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DateSpan:
    """A time expression found in a text, as calendar dates (ISO, inclusive)."""

    text: str
    start: str
    end: str


@dataclasses.dataclass(frozen=True, slots=True)
class Version:
    """One version of a memory, as ``memory.history`` lists them."""

    version: int
    content: str
    metadata: dict[str, t.Any]
    event: str  # "add" or "update"
    at: int  # epoch ms


# One encoder each, made once: json.dumps with options builds a new one per
# call, which costs more than encoding a small object (import encodes three
# per memory).
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def compact_json(value: t.Any) -> str:
    """JSON as memsvc stores it: compact, UTF-8 as is, keys in the order given."""
    return _COMPACT.encode(value)


def dedupe_key(content: str, metadata: dict[str, t.Any]) -> bytes:
    """What makes two memories of a user duplicates: the trimmed text and the metadata.

    Metadata key order does not matter; array order, letter case and inner
    spaces do.
    """
    canonical = _CANONICAL.encode([content.strip(), metadata])
    return hashlib.sha256(canonical.encode("utf-8")).digest()


@dataclasses.dataclass(frozen=True, slots=True)
class ScoredMemory:
    memory: Memory
    #: The cosine similarity to the query (a long memory's best window's).
    similarity: float
    #: Which searches found it ("keyword", "semantic"), in keyword and hybrid modes.
    matched_by: tuple[str, ...] | None = None
    #: Its keyword match's strength in [0, 1] (:mod:`memsvc.search.bm25`); None: no match.
    keyword: float | None = None
    #: What the search's mode ranked it by: the cosine (semantic, the
    #: default), BM25 (keyword), the fused score (hybrid).
    score: float | None = None
    #: The named parts a fused score adds up (hybrid: ``cosine``, ``keyword``).
    parts: t.Mapping[str, float] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    """Which of a user's memories a listing or search takes, by kind and time.

    The default takes every kind, at any time, and leaves out only facts a
    newer fact superseded.
    """

    #: "memory", "message", "fact"; None: all.
    kinds: frozenset[str] | None = None
    #: Exclusive bounds on a memory's time (``occurredAt``, else ``createdAt``), epoch ms.
    occurred_after: int | None = None
    occurred_before: int | None = None
    #: As of this time: memories whose time is at or before it, facts current then.
    as_of: int | None = None
    include_superseded: bool = False

    @property
    def everything(self) -> bool:
        """Whether it takes every memory but superseded facts (the default)."""
        return self == _DEFAULT_SELECTION

    def admits(self, memory: Memory) -> bool:
        kind = memory.kind or "memory"
        if self.kinds is not None and kind not in self.kinds:
            return False
        time = memory.time
        if self.occurred_after is not None and time <= self.occurred_after:
            return False
        if self.occurred_before is not None and time >= self.occurred_before:
            return False
        if self.as_of is not None:
            if time > self.as_of:
                return False
            if not self.include_superseded:
                return memory.valid_to is None or memory.valid_to > self.as_of
            return True
        return self.include_superseded or memory.superseded_by is None


_DEFAULT_SELECTION = Selection()


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """One conversation of an end user, as ``memory.sessions`` lists them."""

    session_id: str
    #: Its visible messages.
    messages: int
    #: The earliest and the latest of its messages' times (epoch ms).
    first_at: int
    last_at: int


#: What an extraction job may be: waiting, its model call in flight, applied, given up.
JOB_STATUSES = ("queued", "running", "done", "failed")


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """An extraction job: facts to draw from some of a user's messages (``memory.job``)."""

    id: str
    tenant: str
    user_id: str
    session_id: str | None
    #: One of :data:`JOB_STATUSES`.
    status: str
    #: Model calls made for it so far.
    attempts: int
    created_at: int  # epoch ms
    updated_at: int
    #: The memory ids of the messages it reads.
    messages: tuple[str, ...]
    #: Why it failed, or why it waits.
    error: str | None = None
    #: Applied: {"added": [id...], "superseded": [id...], "unchanged": n}.
    facts: dict[str, t.Any] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Not run before this time (epoch ms): its backoff, or its tenant's budget.
    run_after: int = 0
    #: A re-extraction: the facts drawn from its messages before are replaced.
    replaces: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class EndUser:
    """An end user of a tenant, as ``memory.users`` lists them."""

    user_id: str
    #: Their visible memories (expired ones not counted).
    memories: int
    #: The newest add or update of any of their memories (epoch ms).
    last_write_at: int


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    tenant: str
    key_id: str
    name: str
    created_at: int
    last_used_at: int | None
    revoked_at: int | None
    #: The limits its tenant chose (``keys.setLimits``; 0: unlimited), at most
    #: its ceilings; None: the ceiling.
    rate_limit: int | None = None
    concurrency_limit: int | None = None
    #: The operator's limits for the key (``memsvc keys set-limits``), which
    #: its tenant may only lower; None: the server's settings.
    rate_ceiling: int | None = None
    concurrency_ceiling: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def per_minute(self) -> int | None:
        """The key's rate limit, the tenant's and the operator's together (None: the server's)."""
        return tighter(self.rate_limit, self.rate_ceiling)

    @property
    def concurrent(self) -> int | None:
        """The key's concurrency limit, as :attr:`per_minute` (None: the server's)."""
        return tighter(self.concurrency_limit, self.concurrency_ceiling)


def tighter(a: int | None, b: int | None) -> int | None:
    """The lower of two limits, 0 being unlimited and None unset."""
    if a is None or b is None:
        return b if a is None else a
    if not a or not b:
        return a or b
    return min(a, b)


@dataclasses.dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new key with its secret, which exists only in this value."""

    key: ApiKey
    secret: str = dataclasses.field(repr=False)
