"""The sentence encoder's forward pass on ONNX Runtime, int8, one thread.

The model is converted from the bundled safetensors weights by
:mod:`.onnx_graph`, never downloaded. Given a cache directory (memsvc passes
its instance folder), the converted model is written there once per box:

- in a directory named after a hash of the source weights, the config and
  the converter version, so new weights or a new converter get a new one;
- built in a private temporary directory (0700, files 0600) and renamed into
  place, under a lock file, so concurrent workers neither see half a model
  nor build it twice;
- weights in a separate file at page-aligned offsets, which ONNX Runtime
  memory-maps: the large word-embedding table is then one copy in the page
  cache shared by every worker, as the safetensors file is for the numpy
  forward;
- with a manifest of SHA-256 digests, checked on every load: a truncated or
  corrupted copy is rebuilt, not used.

Without a cache directory the model is converted in memory by each process.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import typing as t

import numpy as np

from .onnx_graph import CONVERTER_VERSION
from .onnx_graph import INPUTS
from .onnx_graph import OUTPUT

log = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "weights.bin"
MANIFEST_FILE = "manifest.json"
# ONNX Runtime maps external data whose offset is a multiple of the
# allocation granularity (the page size on Linux, 64 KiB on Windows).
ALIGN = 65536
# Smaller tensors stay inside model.onnx: padding each to ALIGN would waste
# more than sharing them saves.
EXTERNAL_MIN_BYTES = 65536


class BackendUnavailable(RuntimeError):
    """The ONNX backend cannot run here; the numpy forward can."""


# Digests this process has computed, by the file's identity and change times.
# Hashing the weights (90 MB) took 0.1 s every time an app was made; any
# write to a file changes its ctime, which no one can set back, so a file
# whose stat matches is the file that was hashed.
_digests: dict[tuple[int, ...], str] = {}
_digests_lock = threading.Lock()


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        before = _identity(os.fstat(f.fileno()))
        with _digests_lock:
            known = _digests.get(before)
        if known is not None:
            return known
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        if _identity(os.fstat(f.fileno())) == before:  # not written to while read
            with _digests_lock:
                _digests[before] = digest
        return digest


def cache_key(model_dir: str, quantize: str) -> str:
    """Names the converted model: source weights, config, converter, quantization."""
    digest = hashlib.sha256(f"memsvc-onnx:{CONVERTER_VERSION}:{quantize}\n".encode())
    for name in ("config.json", "model.safetensors"):
        digest.update(f"{name}:{_sha256_file(os.path.join(model_dir, name))}\n".encode())
    return digest.hexdigest()[:32]


def _build(model_dir: str, quantize: str) -> t.Any:
    from .encoding import load_model_weights
    from .onnx_graph import build_graph

    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    return build_graph(load_model_weights(model_dir), config, quantize)


def _write_private(path: str, data: bytes | memoryview) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_model(model: t.Any, directory: str) -> None:
    """Save ``model`` into ``directory``: graph, aligned external weights, manifest."""
    from onnx import TensorProto

    fd = os.open(os.path.join(directory, WEIGHTS_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as weights:
        offset = 0
        for tensor in model.graph.initializer:
            if len(tensor.raw_data) < EXTERNAL_MIN_BYTES:
                continue
            pad = -offset % ALIGN
            weights.write(b"\0" * pad)
            offset += pad
            data = tensor.raw_data
            weights.write(data)
            tensor.ClearField("raw_data")
            tensor.data_location = TensorProto.EXTERNAL
            del tensor.external_data[:]
            where = {"location": WEIGHTS_FILE, "offset": offset, "length": len(data)}
            for key, value in where.items():
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            offset += len(data)
        weights.flush()
        os.fsync(weights.fileno())
    _write_private(os.path.join(directory, MODEL_FILE), model.SerializeToString())
    manifest = {
        "converter": CONVERTER_VERSION,
        "sha256": {n: _sha256_file(os.path.join(directory, n)) for n in (MODEL_FILE, WEIGHTS_FILE)},
    }
    _write_private(os.path.join(directory, MANIFEST_FILE), json.dumps(manifest).encode())


def _intact(directory: str) -> bool:
    try:
        with open(os.path.join(directory, MANIFEST_FILE)) as f:
            expected = json.load(f)["sha256"]
        return set(expected) == {MODEL_FILE, WEIGHTS_FILE} and all(
            _sha256_file(os.path.join(directory, name)) == digest
            for name, digest in expected.items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


@contextlib.contextmanager
def _locked(path: str) -> t.Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def converted_model(model_dir: str, cache_dir: str, quantize: str = "int8") -> str:
    """Path of the converted BERT model in ``cache_dir``, building it first if needed."""
    return cached_model(
        cache_dir, f"encoder-{cache_key(model_dir, quantize)}", lambda: _build(model_dir, quantize)
    )


def cached_model(cache_dir: str, name: str, build: t.Callable[[], t.Any]) -> str:
    """Path of the model ``name`` in ``cache_dir``, made by ``build()`` first if needed.

    ``name`` must change whenever what ``build`` makes would: a hash of its
    sources and of the converter's version.
    """
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    target = os.path.join(cache_dir, name)
    with _locked(target + ".lock"):
        if _intact(target):
            return os.path.join(target, MODEL_FILE)
        if os.path.lexists(target):
            log.warning("rebuilding the converted embedding model: %s is damaged", target)
            # Out of the way first, so no one loads it while it is removed.
            doomed = tempfile.mkdtemp(prefix=".damaged-", dir=cache_dir)
            os.rename(target, os.path.join(doomed, name))
            shutil.rmtree(doomed, ignore_errors=True)
        building = tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir)  # mode 0700
        try:
            write_model(build(), building)
            os.rename(building, target)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        with contextlib.suppress(OSError):  # make the rename itself durable
            dir_fd = os.open(cache_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    return os.path.join(target, MODEL_FILE)


def session_options() -> t.Any:
    """One intra-op thread: gunicorn already runs one worker per core."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: no warnings on stderr per worker
    return options


def load_session(cache_dir: str | None, name: str, build: t.Callable[[], t.Any]) -> t.Any:
    """An ONNX Runtime session of the model ``build()`` makes, kept in ``cache_dir`` as ``name``.

    :class:`BackendUnavailable` if ONNX Runtime or onnx cannot be imported.
    """
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise BackendUnavailable(f"onnxruntime cannot be imported: {e}") from None

    def load(path: str) -> t.Any:
        return ort.InferenceSession(path, session_options(), providers=["CPUExecutionProvider"])

    try:
        if cache_dir is None:
            # Through a file all the same: ONNX Runtime copies weights it is
            # handed in memory but maps those it reads from a file (148 MB
            # against 23 MB of private memory, measured).
            with tempfile.TemporaryDirectory(prefix="memsvc-encoder-") as private:
                write_model(build(), private)
                return load(os.path.join(private, MODEL_FILE))
        return load(cached_model(cache_dir, name, build))
    except ImportError as e:  # onnx, needed to build the graph
        raise BackendUnavailable(f"cannot build the ONNX model: {e}") from None


class OnnxForward:
    """Padded token ids and mask in, unit-length float32 vectors out, via ONNX Runtime.

    ``InferenceSession.run`` is thread-safe, so one instance serves every
    thread of a worker.
    """

    #: Sentences per run. Measured on one core: 4 to 12 gave the best
    #: throughput (within noise of each other); 16 and more lost more to
    #: padding and cache misses than they saved in per-run overhead.
    batch_size = 8

    def __init__(self, model_dir: str, cache_dir: str | None = None, quantize: str = "int8"):
        name = "" if cache_dir is None else f"encoder-{cache_key(model_dir, quantize)}"
        self.session = load_session(cache_dir, name, lambda: _build(model_dir, quantize))
        self.quantize = quantize

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = dict(zip(INPUTS, (ids, mask.astype(np.int64)), strict=True))
        return self.session.run([OUTPUT], feed)[0]
