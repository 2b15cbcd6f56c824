"""What every embedder is: the :class:`Embedder` base class, its errors, :func:`unit_rows`.

The rest of memsvc asks an embedder only what this class declares. The
capabilities a model may lack (cutting its own windows, vectors that move
with their batch-mates, a token limit, work to do before gunicorn forks)
are members with the defaults of the simplest model; an embedder overrides
those that differ, so nothing needs to probe for them.

Nothing here imports the implementations, and they import this module
only, never the package (which chooses among them in ``make_embedder``):
imports within :mod:`memsvc.embeddings` point one way.
"""

from __future__ import annotations

import abc
import typing as t

import numpy as np

from ..errors import BadRequest
from ..errors import InternalError
from ..errors import ServiceUnavailable


class Embedder(abc.ABC):
    """Text to unit-length float32 vectors, so cosine similarity is a dot product."""

    #: Identifies the model whose vectors the database holds, e.g.
    #: ``openai:text-embedding-3-small``.
    model_id: str
    dimensions: int

    #: Whether a text's vector is the same whatever else is embedded in the
    #: same call. Default True. An embedder whose vectors move slightly with
    #: their batch-mates (int8 activations with one scale per run) says
    #: False, and a whole text is then embedded on its own where it must
    #: match a query of it exactly (see :func:`.windows.document_vectors`).
    batch_invariant: bool = True

    @abc.abstractmethod
    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""

    @abc.abstractmethod
    def warm_up(self) -> None:
        """Get ready to embed (load a model) before the first request needs it."""

    @property
    def max_tokens(self) -> int | None:
        """The most tokens the model takes in one text, special tokens included.

        Default None: memsvc cannot count the model's tokens (a remote
        provider's). ``service.info`` reports it as ``maxTokens``.
        """
        return None

    def windows(self, text: str) -> list[str]:
        """What to embed for ``text``, each within what the model takes whole.

        Default: the text itself, one window. An embedder that cuts longer
        texts returns their overlapping windows (see :mod:`.windows`), with
        the whole text first when the model still takes it whole.
        """
        return [text]

    def prepare(self) -> None:
        """Do, once, what should be done before gunicorn forks its workers.

        Default: nothing. The local models convert themselves for ONNX
        Runtime here, so that every worker only loads the converted file.
        """
        return None


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
