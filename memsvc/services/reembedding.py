"""Operator maintenance on the whole database: re-embedding every memory."""

from __future__ import annotations

import typing as t

from ..embeddings import Embedder
from ..embeddings.windows import document_vectors
from ..store import FullStore


def reembed(
    store: FullStore,
    embedder: Embedder,
    batch_size: int = 64,
    progress: t.Callable[[int], None] = lambda done: None,
) -> int:
    """Re-embed every memory with ``embedder`` and make it the database's model.

    New vectors are staged batch by batch, each batch committed: an
    interrupted run resumes where it stopped, and memory use stays one
    batch. The switch to them is one transaction at the end, so searches
    use the old vectors until then. Returns how many memories were embedded.
    """
    with store.write():
        store.start_reembed(embedder.model_id)
    done = 0
    while True:
        with store.read():
            batch = store.unstaged_memories(batch_size)
        if not batch:
            with store.write():
                # Memories added meanwhile are embedded in another round.
                if not store.has_unstaged():
                    store.switch_to_staged(embedder.model_id, embedder.dimensions)
                    return done
            continue
        vectors = document_vectors(embedder, [content for _, content in batch])
        with store.write():
            store.stage_vectors(
                embedder.model_id, [(seq, v) for (seq, _), v in zip(batch, vectors, strict=True)]
            )
        done += len(batch)
        progress(done)
