"""Memories: add, search, list, fetch and delete, within one tenant."""

from __future__ import annotations

import typing as t
import uuid

from .. import clock
from ..embeddings import Embedder
from ..errors import NotFound
from ..models import Memory
from ..models import ScoredMemory
from ..search_cache import SearchCache
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
    with store.read():
        if cache is not None:
            found = cache.nearest(store, tenant, user_id, vector, limit, threshold)
        else:
            found = store.nearest(tenant, user_id, vector, limit, threshold)
    return [ScoredMemory(memory, similarity) for memory, similarity in found]


def get_all(store: Store, tenant: str, user_id: str, limit: int) -> list[Memory]:
    return store.list_memories(tenant, user_id, limit)


def get(store: Store, tenant: str, memory_id: str) -> Memory:
    memory = store.get_memory(tenant, memory_id)
    if memory is None:
        raise NotFound("Memory not found")
    return memory


def delete(store: Store, tenant: str, memory_id: str) -> None:
    with store.write():
        if not store.delete_memory(tenant, memory_id):
            raise NotFound("Memory not found")


def reembed(
    store: Store,
    embedder: Embedder,
    batch_size: int = 64,
    progress: t.Callable[[int], None] = lambda done: None,
) -> int:
    """Re-embed every memory with ``embedder`` and make it the database's model.

    Resumable: run it again after an interruption and it continues. Returns
    how many memories were embedded.
    """
    store.start_reembed(embedder.model_id)
    done = 0
    while True:
        batch = store.unstaged_memories(batch_size)
        if not batch:
            if store.finish_reembed(embedder.model_id, embedder.dimensions):
                return done
            continue
        vectors = embedder.embed([content for _, content in batch])
        store.stage_vectors(
            embedder.model_id, [(seq, v) for (seq, _), v in zip(batch, vectors, strict=True)]
        )
        done += len(batch)
        progress(done)
