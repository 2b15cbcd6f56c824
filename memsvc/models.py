"""The records memsvc keeps, as plain values shared by services and the store."""

from __future__ import annotations

import dataclasses
import typing as t


@dataclasses.dataclass(frozen=True, slots=True)
class Memory:
    id: str
    tenant: str
    user_id: str
    content: str
    metadata: dict[str, t.Any]
    created_at: int  # epoch milliseconds
    updated_at: int


@dataclasses.dataclass(frozen=True, slots=True)
class ScoredMemory:
    memory: Memory
    similarity: float


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
