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


@dataclasses.dataclass(frozen=True, slots=True)
class Version:
    """One version of a memory, as ``memory.history`` lists them."""

    version: int
    content: str
    metadata: dict[str, t.Any]
    event: str  # "add" or "update"
    at: int  # epoch ms


def compact_json(value: t.Any) -> str:
    """JSON as memsvc stores it: compact, UTF-8 as is, keys in the order given."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dedupe_key(content: str, metadata: dict[str, t.Any]) -> bytes:
    """What makes two memories of a user duplicates: the trimmed text and the metadata.

    Metadata key order does not matter; array order, letter case and inner
    spaces do.
    """
    canonical = json.dumps(
        [content.strip(), metadata], ensure_ascii=False, separators=(",", ":"), sort_keys=True
    )
    return hashlib.sha256(canonical.encode("utf-8")).digest()


@dataclasses.dataclass(frozen=True, slots=True)
class ScoredMemory:
    memory: Memory
    #: The cosine similarity to the query (a long memory's best window's).
    similarity: float
    #: Which searches found it ("keyword", "semantic"), in keyword and hybrid modes.
    matched_by: tuple[str, ...] | None = None
    #: Its keyword match's strength in [0, 1] (:mod:`memsvc.search.keyword`); None: no match.
    keyword: float | None = None
    #: What the search's mode ranked it by: the cosine (semantic, the
    #: default), BM25 (keyword), the fused score (hybrid).
    score: float | None = None


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
    #: Per-key overrides of the global limits; None = the global setting.
    rate_limit: int | None = None
    concurrency_limit: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclasses.dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new key with its secret, which exists only in this value."""

    key: ApiKey
    secret: str = dataclasses.field(repr=False)
