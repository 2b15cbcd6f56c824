"""What every embedder is: the :class:`Embedder` interface, its errors, :func:`unit_rows`.

Nothing here imports the implementations, and they import this module
only, never the package (which chooses among them in ``make_embedder``):
imports within :mod:`memsvc.embeddings` point one way.
"""

from __future__ import annotations

import typing as t

import numpy as np

from ..errors import BadRequest
from ..errors import InternalError
from ..errors import ServiceUnavailable


class Embedder(t.Protocol):
    #: Identifies the model whose vectors the database holds, e.g.
    #: ``openai:text-embedding-3-small``.
    model_id: str
    dimensions: int

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""
        ...

    def warm_up(self) -> None:
        """Get ready to embed (load a model) before the first request needs it."""
        ...


class InputTooLong(BadRequest):
    """The text is longer than the embedding model accepts."""


class ProviderError(InternalError):
    """The embedding model failed; nothing was stored."""


class ProviderBusy(ServiceUnavailable):
    """Too many calls of this worker already wait on the embedding provider."""

    def __init__(self, message: str):
        super().__init__(message, headers={"Retry-After": "1"})


def unit_rows(vectors: t.Any, count: int, dimensions: int) -> np.ndarray:
    """Check a provider's vectors and scale each to unit length."""
    try:
        with np.errstate(over="ignore"):  # too large for float32: caught below as inf
            array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        raise ProviderError("embedding provider failed: vectors are not lists of numbers") from None
    if array.shape != (count, dimensions):
        raise ProviderError(
            f"embedding provider failed: expected {count} vector(s) of {dimensions} "
            f"dimensions, got shape {array.shape}"
        )
    if not np.isfinite(array).all():
        raise ProviderError("embedding provider failed: vector holds NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ProviderError("embedding provider failed: returned an all-zero vector")
    return array / norms
