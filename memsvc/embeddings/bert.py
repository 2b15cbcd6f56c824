"""A BERT sentence encoder (e.g. all-MiniLM-L6-v2): tokenizer, batching, forward.

Runs a sentence-transformers model directory (``config.json``,
``tokenizer.json``, ``model.safetensors``, mean pooling, normalisation) with
no deep-learning framework. Two forwards compute the same thing:

- ``onnx``: int8 on ONNX Runtime (:mod:`.onnx_backend`), about 8x faster
  on one core; vectors within cosine 0.99 of float32 (0.996 on average).
- ``numpy``: float32 in plain numpy, the weights memory-mapped straight from
  the safetensors file, so every gunicorn worker shares one copy in the page
  cache. Its output matches sentence-transformers to about 1e-7 (checked by
  ``tests/unit/test_local_embedder.py`` against vectors that library
  produced). It is the fallback where ONNX Runtime cannot run, and the
  baseline ``bench/embedding.py`` measures the other against.
"""

from __future__ import annotations

import json
import logging
import os
import typing as t

import numpy as np
from tokenizers import Tokenizer

from .encoding import BACKENDS
from .encoding import TooManyTokens
from .encoding import load_model_weights

if t.TYPE_CHECKING:
    from .onnx_backend import OnnxForward

log = logging.getLogger(__name__)


# Numerical Recipes' erfc approximation (fractional error < 1.2e-7, as exact
# as float32 allows); numpy has no erf of its own.
_ERFC_POLY = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip


def _erf(x: np.ndarray) -> np.ndarray:
    z = np.abs(x)
    s = 1.0 / (1.0 + 0.5 * z)
    poly = np.full_like(s, _ERFC_POLY[-1])
    for c in reversed(_ERFC_POLY[:-1]):
        poly = poly * s + c
    r = 1.0 - s * np.exp(-z * z + poly)
    return np.where(x >= 0, r, -r)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x * np.float32(1 / np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdims=True)
    return centered / np.sqrt(var + eps) * weight + bias


class _Layer:
    """One transformer layer's weights, named as in the checkpoint."""

    def __init__(self, w: dict[str, np.ndarray], prefix: str, eps: float):
        self.w = {k.removeprefix(prefix): v for k, v in w.items() if k.startswith(prefix)}
        self.eps = eps

    def dense(self, h: np.ndarray, name: str) -> np.ndarray:
        return h @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def norm(self, h: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(
            h, self.w[name + ".LayerNorm.weight"], self.w[name + ".LayerNorm.bias"], self.eps
        )


class NumpyForward:
    """Padded token ids and mask in, unit-length float32 vectors out, in numpy."""

    #: Sentences per forward: larger batches amortise numpy's per-call cost.
    batch_size = 32

    def __init__(self, weights: dict[str, np.ndarray], config: dict[str, t.Any]):
        self.dimensions: int = config["hidden_size"]
        self.heads: int = config["num_attention_heads"]
        self.eps: float = config.get("layer_norm_eps", 1e-12)
        self._w = weights
        self._layers = [
            _Layer(weights, f"encoder.layer.{i}.", self.eps)
            for i in range(config["num_hidden_layers"])
        ]

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self._w
        batch, n = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        heads = self.heads
        head_dim = self.dimensions // heads
        scale = np.float32(1.0 / np.sqrt(head_dim))
        # Padding positions get a large negative score, so softmax ignores them.
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]

        def split(h: np.ndarray) -> np.ndarray:
            return h.reshape(batch, n, heads, head_dim).transpose(0, 2, 1, 3)

        for layer in self._layers:
            q = split(layer.dense(x, "attention.self.query"))
            k = split(layer.dense(x, "attention.self.key"))
            v = split(layer.dense(x, "attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, n, self.dimensions)
            x = layer.norm(x + layer.dense(context, "attention.output.dense"), "attention.output")
            hidden = _gelu(layer.dense(x, "intermediate.dense"))
            x = layer.norm(x + layer.dense(hidden, "output.dense"), "output")
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


class SentenceEncoder:
    """Mean-pooled, L2-normalised BERT sentence embeddings.

    ``backend``: ``"onnx"`` (int8 on ONNX Runtime; fails if it cannot run),
    ``"numpy"`` (float32), or ``"auto"``: ONNX Runtime where it works, else
    numpy with a warning in the log. ``cache_dir`` is where the ONNX backend
    keeps its converted model (see :mod:`.onnx_backend`); ``None`` converts
    in memory in each process. ``quantize`` (``"int8"``, or
    ``"int8-blocks"``, ``"int8-dynamic"``, ``"none"``; see
    :mod:`.onnx_graph`) is for measuring the alternatives.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        backend: str = "numpy",
        cache_dir: str | os.PathLike[str] | None = None,
        quantize: str = "int8",
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        model_dir = os.fspath(model_dir)
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        self.dimensions: int = config["hidden_size"]
        self.max_tokens: int = config["max_position_embeddings"]
        st_config = os.path.join(model_dir, "sentence_bert_config.json")
        if os.path.exists(st_config):
            with open(st_config) as f:
                self.max_tokens = min(self.max_tokens, json.load(f)["max_seq_length"])
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        # The bundled tokenizer.json pads and truncates to 128; memsvc pads
        # per batch and refuses over-long input instead of cutting it.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        forward: OnnxForward | NumpyForward | None = None
        if backend != "numpy":
            from .onnx_backend import OnnxForward

            try:
                forward = OnnxForward(
                    model_dir, None if cache_dir is None else os.fspath(cache_dir), quantize
                )
                self.backend = f"onnx-{quantize}"
            except Exception as e:
                if backend == "onnx":
                    raise
                log.warning("embedding on numpy (slower): the ONNX backend failed: %s", e)
        if forward is None:
            forward = NumpyForward(load_model_weights(model_dir), config)
            self.backend = "numpy"
        self._forward: OnnxForward | NumpyForward = forward
        self.batch_size: int = forward.batch_size

    def encode(self, texts: t.Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Embed ``texts``; each must fit in :attr:`max_tokens` tokens."""
        encodings = self.tokenizer.encode_batch(list(texts))
        return self.encode_ids([e.ids for e in encodings], batch_size)

    def encode_ids(
        self, ids: t.Sequence[t.Sequence[int]], batch_size: int | None = None
    ) -> np.ndarray:
        """Embed token id sequences (with their [CLS] and [SEP]), as :meth:`encode` would."""
        for seq in ids:
            if not seq:
                raise ValueError("an empty token sequence: each needs at least [CLS] and [SEP]")
            if len(seq) > self.max_tokens:
                raise TooManyTokens(f"{len(seq)} tokens, more than its limit of {self.max_tokens}")
        batch_size = batch_size or self.batch_size
        out = np.empty((len(ids), self.dimensions), dtype=np.float32)
        # Similar lengths together keep padding (wasted work) small.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(ids[i]) for i in idx)
            batch = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.float32)
            for row, i in enumerate(idx):
                n = len(ids[i])
                batch[row, :n] = ids[i]
                mask[row, :n] = 1.0
            out[idx] = self._forward(batch, mask)
        return out
