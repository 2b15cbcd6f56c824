"""The sentence encoder as an ONNX graph, built from the safetensors weights.

No exporter, no torch: the graph is written node by node with the ``onnx``
package's helper API, the same computation as :mod:`.bert`'s numpy forward
(embeddings, post-LayerNorm BERT layers, mean pooling, L2 normalisation).
Building is deterministic: the same weights and converter version give the
same bytes.

With ``quantize="int8"`` (what memsvc ships) every dense layer's weights
become int8, per output channel. Three of each layer's four multiplies run
as ``DynamicQuantizeMatMul``: activations quantized with one scale per call,
int8 products (VNNI where the CPU has it). The fourth, the feed-forward
output, whose input (after GELU) has the widest range and was measured to
lose the most to one scale, runs as ``MatMulNBits`` with 8-bit blocks of 128
and ``accuracy_level=4``, which quantizes each activation row per block of
128. Measured on one core (``bench/embedding.py``) against the alternatives
this module also builds, on memsvc's 120 test sentences:

- ``int8-blocks`` (every multiply as ``MatMulNBits``): closest to float32
  (cosine 0.9986 at worst) but about 400 sentences/s, 30% slower;
- ``int8-dynamic`` (every multiply as ``DynamicQuantizeMatMul``): about 15%
  faster, but cosine 0.988 at worst;
- ``int8``: cosine 0.9935 at worst (0.996 on average), about 570/s;
- ``none``: float32, 5x slower than ``int8`` on short sentences.

One activation scale per call means a sentence's vector moves slightly with
its batch-mates (cosine 0.99 at worst, alone against batched; see
``tests/unit/test_local_embedder.py``): well inside the model's own
resolution, where related sentences differ by 0.2 and more.

The word embedding table stays float32: it is a lookup, not a multiply, and
quantizing it buys nothing but error.
"""

from __future__ import annotations

import typing as t

import numpy as np

if t.TYPE_CHECKING:
    import onnx

#: Bumped whenever the graph or the quantization changes, so cached files
#: built by an older converter are rebuilt.
CONVERTER_VERSION = 2
QUANTIZE_CHOICES = ("int8", "int8-blocks", "int8-dynamic", "none")
BLOCK = 128
OPSET = 17
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "embedding"


def _quantize_blocks(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 8-bit codes and scales of ``w`` ([out, in]) per block of BLOCK inputs."""
    n, k = w.shape
    blocks = -(-k // BLOCK)
    padded = np.zeros((n, blocks * BLOCK), dtype=np.float32)
    padded[:, :k] = w
    padded = padded.reshape(n, blocks, BLOCK)
    scales = np.abs(padded).max(axis=2) / np.float32(127)
    safe = np.where(scales == 0, np.float32(1), scales)
    codes = np.clip(np.rint(padded / safe[:, :, None]), -127, 127)
    # MatMulNBits stores unsigned codes; with no zero-point input it takes
    # 2^(bits-1) = 128 as every block's zero point.
    return (codes + 128).astype(np.uint8), scales.astype(np.float32)


class _Builder:
    def __init__(self, quantize: str):
        from onnx import helper

        self.helper = helper
        self.quantize = quantize
        self.nodes: list[t.Any] = []
        self.initializers: list[t.Any] = []

    def const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs) -> str:
        self.nodes.append(
            self.helper.make_node(op, inputs, [output], name=output, domain=domain, **attrs)
        )
        return output

    def dense(self, x: str, weight: np.ndarray, bias: np.ndarray, name: str) -> str:
        """``x @ weight.T + bias``, ``weight`` as stored by PyTorch ([out, in])."""
        out_features, in_features = weight.shape
        if self.quantize == "none":
            mm = self.node("MatMul", [x, self.const(name + ".weight", weight.T)], name + ".mm")
            return self.node("Add", [mm, self.const(name + ".bias", bias)], name)
        if self.quantize == "int8-dynamic" or (
            self.quantize == "int8" and not name.endswith("ffn_out")
        ):
            # Weights int8 per output channel, activations with one scale
            # per call (see above).
            scales = np.abs(weight).max(axis=1) / np.float32(127)
            safe = np.where(scales == 0, np.float32(1), scales)
            codes = np.clip(np.rint(weight / safe[:, None]), -127, 127).astype(np.int8)
            return self.node(
                "DynamicQuantizeMatMul",
                [x, self.const(name + ".codes", codes.T), self.const(name + ".scales", scales),
                 "", self.const(name + ".bias", bias)],
                name, domain="com.microsoft",
            )  # fmt: skip
        # int8-blocks, and int8's feed-forward output.
        codes, scales = _quantize_blocks(weight)
        return self.node(
            "MatMulNBits",
            [
                x,
                self.const(name + ".codes", codes),
                self.const(name + ".scales", scales),
                "",  # zero points: the default 128
                "",  # g_idx
                self.const(name + ".bias", bias),
            ],
            name,
            domain="com.microsoft",
            K=in_features,
            N=out_features,
            bits=8,
            block_size=BLOCK,
            accuracy_level=4,  # int8 compute: activations quantized per row and block
        )


def build_graph(
    weights: t.Mapping[str, np.ndarray], config: t.Mapping[str, t.Any], quantize: str = "int8"
) -> onnx.ModelProto:
    """The encoder's ONNX model: ids and mask in, unit-length float32 vectors out."""
    from onnx import TensorProto
    from onnx import helper

    if quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize must be one of {QUANTIZE_CHOICES}, not {quantize!r}")
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    w = weights
    b = _Builder(quantize)

    # Embeddings: word + position (sliced to the sequence length) + token
    # type 0, then LayerNorm.
    seq = b.node("Shape", ["input_ids"], "seq_len", start=1, end=2)
    zero = b.const("zero", np.array([0], np.int64))
    position_table = b.const("position_table", w["embeddings.position_embeddings.weight"])
    positions = b.node("Slice", [position_table, zero, seq, zero], "positions")
    word_table = b.const("word_table", w["embeddings.word_embeddings.weight"])
    words = b.node("Gather", [word_table, "input_ids"], "words")
    summed = b.node("Add", [words, positions], "emb.words_positions")
    token_type = b.const("token_type0", w["embeddings.token_type_embeddings.weight"][0])
    summed = b.node("Add", [summed, token_type], "emb.sum")
    gamma = b.const("emb.ln.weight", w["embeddings.LayerNorm.weight"])
    beta = b.const("emb.ln.bias", w["embeddings.LayerNorm.bias"])
    x = b.node("LayerNormalization", [summed, gamma, beta], "emb.out", axis=-1, epsilon=eps)

    # Padding positions get a large negative attention score, as in the
    # numpy forward, so softmax gives them no weight.
    mask = b.node("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverted = b.node("Sub", [b.const("one", np.array(1, np.float32)), mask], "mask.inverted")
    scores_bias = b.node(
        "Mul", [inverted, b.const("minus_inf", np.array(-1e9, np.float32))], "mask.bias3"
    )
    scores_bias = b.node(
        "Unsqueeze", [scores_bias, b.const("axes_1_2", np.array([1, 2], np.int64))], "mask.bias"
    )
    split_heads = b.const("shape.heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_heads = b.const("shape.hidden", np.array([0, 0, hidden], np.int64))
    scale = b.const("attention.scale", np.array(1 / np.sqrt(head_dim), np.float32))

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        n = f"l{i}."

        def weight(name: str, p: str = p) -> np.ndarray:
            return w[p + name + ".weight"]

        def bias(name: str, p: str = p) -> np.ndarray:
            return w[p + name + ".bias"]

        def layer_norm(x: str, residual: str, name: str, out: str, p: str = p) -> str:
            return b.node(
                "SkipLayerNormalization",
                [x, residual, b.const(out + ".weight", w[p + name + ".LayerNorm.weight"]),
                 b.const(out + ".bias", w[p + name + ".LayerNorm.bias"])],
                out, domain="com.microsoft", epsilon=eps,
            )  # fmt: skip

        # One multiply for query, key and value.
        qkv_names = ("attention.self.query", "attention.self.key", "attention.self.value")
        qkv = b.dense(
            x,
            np.concatenate([weight(m) for m in qkv_names]),
            np.concatenate([bias(m) for m in qkv_names]),
            n + "qkv",
        )
        b.nodes.append(
            helper.make_node(
                "Split",
                [qkv, b.const(n + "split_sizes", np.array([hidden] * 3, np.int64))],
                [n + "q", n + "k", n + "v"],
                name=n + "split",
                axis=2,
            )
        )
        q = b.node("Reshape", [n + "q", split_heads], n + "q.heads")
        k = b.node("Reshape", [n + "k", split_heads], n + "k.heads")
        v = b.node("Reshape", [n + "v", split_heads], n + "v.heads")
        q = b.node("Transpose", [q], n + "q.t", perm=[0, 2, 1, 3])
        k = b.node("Transpose", [k], n + "k.t", perm=[0, 2, 3, 1])
        v = b.node("Transpose", [v], n + "v.t", perm=[0, 2, 1, 3])
        scores = b.node("MatMul", [q, k], n + "scores.raw")
        scores = b.node("Mul", [scores, scale], n + "scores.scaled")
        scores = b.node("Add", [scores, scores_bias], n + "scores")
        probs = b.node("Softmax", [scores], n + "probs", axis=-1)
        context = b.node("MatMul", [probs, v], n + "context.heads")
        context = b.node("Transpose", [context], n + "context.t", perm=[0, 2, 1, 3])
        context = b.node("Reshape", [context, merge_heads], n + "context")
        out_proj = "attention.output.dense"
        attended = b.dense(context, weight(out_proj), bias(out_proj), n + "attn_out")
        x = layer_norm(attended, x, "attention.output", n + "attn_ln")
        hidden_act = b.dense(
            x, weight("intermediate.dense"), bias("intermediate.dense"), n + "ffn_in"
        )
        # Exact (erf) GELU, as BERT and the numpy forward use.
        hidden_act = b.node("Gelu", [hidden_act], n + "gelu", domain="com.microsoft")
        ffn = b.dense(hidden_act, weight("output.dense"), bias("output.dense"), n + "ffn_out")
        x = layer_norm(ffn, x, "output", n + "out_ln")

    # Mean over real tokens, then unit length.
    mask3 = b.node("Unsqueeze", [mask, b.const("axis_2", np.array([2], np.int64))], "mask.3d")
    masked = b.node("Mul", [x, mask3], "pool.masked")
    axis1 = b.const("axis_1", np.array([1], np.int64))
    total = b.node("ReduceSum", [masked, axis1], "pool.sum", keepdims=0)
    count = b.node("ReduceSum", [mask, axis1], "pool.count", keepdims=1)
    pooled = b.node("Div", [total, count], "pool.mean")
    b.node("LpNormalization", [pooled], OUTPUT, axis=1, p=2)

    graph = helper.make_graph(
        b.nodes,
        "sentence_encoder",
        [helper.make_tensor_value_info(i, TensorProto.INT64, ["batch", "tokens"]) for i in INPUTS],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        b.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        producer_name="memsvc",
        producer_version=str(CONVERTER_VERSION),
    )
    # The oldest IR version that has everything used here, so that older
    # ONNX Runtime releases load it too.
    model.ir_version = 8
    return model
