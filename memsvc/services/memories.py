"""Memories: add, search, list, fetch and delete, within one tenant."""

from __future__ import annotations

import typing as t
import uuid

from .. import clock
from ..embeddings import Embedder
from ..errors import NotFound
from ..models import Memory
from ..models import ScoredMemory
from ..search import SearchCache
from ..search import nearest
from ..store import Store


def add(
    store: Store,
    embedder: Embedder,
    tenant: str,
    user_id: str,
    content: str,
    metadata: dict[str, t.Any],
) -> Memory:
    """Embed and store a memory; it is committed, with its vector, on return."""
    # Embed before taking the write lock: the model may be slow, and a
    # failure here must leave nothing behind.
    (vector,) = embedder.embed([content])
    now = clock.now_ms()
    memory = Memory(
        id=str(uuid.uuid4()),
        tenant=tenant,
        user_id=user_id,
        content=content,
        metadata=metadata,
        created_at=now,
        updated_at=now,
    )
    with store.write():
        store.insert_memory(memory, vector)
    return memory


def search(
    store: Store,
    embedder: Embedder,
    tenant: str,
    user_id: str,
    query: str,
    limit: int,
    threshold: float,
    cache: SearchCache | None = None,
) -> list[ScoredMemory]:
    """The ``limit`` memories most similar to ``query`` with similarity >= ``threshold``.

    Similarity is the cosine similarity, clamped into [0, 1]; the result is
    exact, with or without a ``cache``.
    """
    (vector,) = embedder.embed([query])
    return nearest(store, cache, tenant, user_id, vector, limit, threshold)


def get_all(store: Store, tenant: str, user_id: str, limit: int) -> list[Memory]:
    with store.read():
        return store.list_memories(tenant, user_id, limit)


def get(store: Store, tenant: str, memory_id: str) -> Memory:
    with store.read():
        memory = store.get_memory(tenant, memory_id)
    if memory is None:
        raise NotFound("Memory not found")
    return memory


def delete(store: Store, tenant: str, memory_id: str) -> None:
    with store.write():
        if not store.delete_memory(tenant, memory_id):
            raise NotFound("Memory not found")
