"""What memsvc's tools for models share (the MCP server's, the agent frameworks'): how a
memory is shown to a model, and the JSON text it reads."""

from __future__ import annotations

import json
import typing as t

from .models import Memory
from .models import format_time


def dumps(value: t.Any) -> str:
    """Compact JSON text, non-ASCII kept as it is: fewer of the model's tokens."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def compact(memory: Memory) -> dict[str, t.Any]:
    """A memory as a tool shows it: no user id (implied), no empty fields."""
    out: dict[str, t.Any] = {"id": memory.id, "content": memory.content}
    if memory.similarity is not None:
        out["similarity"] = round(memory.similarity, 4)
    if memory.explain is not None:
        e = memory.explain
        out["explain"] = {
            "cosine": _round(e.cosine),
            "keyword": _round(e.keyword),
            "score": _round(e.score),
        }
    if memory.metadata:
        out["metadata"] = memory.metadata
    out["createdAt"] = format_time(memory.created_at)
    if memory.updated_at != memory.created_at:
        out["updatedAt"] = format_time(memory.updated_at)
    if memory.expires_at is not None:
        out["expiresAt"] = format_time(memory.expires_at)
    return out
