"""What the local models' encoders share, below them and their ONNX backend.

The backends an encoder runs on, the error for a text longer than its
context, and a BERT checkpoint's weights read from safetensors: used by
:mod:`.bert`, :mod:`.use` and :mod:`.onnx_backend`, and by the embedders of
:mod:`.local` and :mod:`.multilingual`, it imports none of them.
"""

from __future__ import annotations

import json
import mmap
import os
import struct

import numpy as np

#: How a local model may run: ONNX Runtime where it works, else numpy
#: (``auto``), or only one of them.
BACKENDS = ("auto", "onnx", "numpy")


class TooManyTokens(ValueError):
    """A text is longer than the model's context."""


_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def load_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read-only arrays viewing a memory-mapped safetensors file."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    (header_len,) = struct.unpack("<Q", mapped[:8])
    header = json.loads(mapped[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(_DTYPES[info["dtype"]])
        start, end = info["data_offsets"]
        array = np.frombuffer(
            mapped, dtype=dtype, count=(end - start) // dtype.itemsize, offset=base + start
        )
        tensors[name] = array.reshape(info["shape"])
    return tensors


def load_model_weights(model_dir: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The model directory's weights, named as in ``BertModel`` (no ``bert.`` prefix)."""
    w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    if "embeddings.word_embeddings.weight" not in w:  # saved from BertForX
        w = {k.removeprefix("bert."): v for k, v in w.items()}
    return w
