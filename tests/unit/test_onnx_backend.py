"""The converted-model cache of the ONNX backend: built once, private, checked, shared."""

import os
import pathlib
import stat

import numpy as np
import pytest

from memsvc.embeddings import onnx_backend
from memsvc.embeddings.bert import SentenceEncoder
from memsvc.embeddings.local import bundled_model_dir

MODEL = bundled_model_dir()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache directory holding the int8 model, and the model's path."""
    cache = tmp_path_factory.mktemp("cache")
    return cache, pathlib.Path(onnx_backend.converted_model(MODEL, str(cache)))


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_model_is_built_once_into_private_files(built):
    cache, model = built
    directory = model.parent
    assert directory.parent == cache
    assert directory.name == f"encoder-{onnx_backend.cache_key(MODEL, 'int8')}"
    assert mode(directory) == 0o700
    files = sorted(p.name for p in directory.iterdir())
    assert files == ["manifest.json", "model.onnx", "weights.bin"]
    assert all(mode(directory / name) == 0o600 for name in files)
    # Nothing left over from building.
    assert sorted(p.name for p in cache.iterdir()) == [directory.name, directory.name + ".lock"]
    before = {name: (directory / name).stat().st_mtime_ns for name in files}
    assert onnx_backend.converted_model(MODEL, str(cache)) == str(model)
    assert {name: (directory / name).stat().st_mtime_ns for name in files} == before


def test_building_is_deterministic(built, tmp_path):
    _, model = built
    again = pathlib.Path(onnx_backend.converted_model(MODEL, str(tmp_path)))
    for name in ("model.onnx", "weights.bin"):
        assert (again.parent / name).read_bytes() == (model.parent / name).read_bytes()


def test_the_key_names_weights_config_converter_and_quantization(monkeypatch):
    int8 = onnx_backend.cache_key(MODEL, "int8")
    assert onnx_backend.cache_key(MODEL, "none") != int8
    monkeypatch.setattr(onnx_backend, "CONVERTER_VERSION", onnx_backend.CONVERTER_VERSION + 1)
    assert onnx_backend.cache_key(MODEL, "int8") != int8


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("weights.bin", lambda data: data[: len(data) // 2]),  # truncated
        ("weights.bin", lambda data: data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]),
        ("model.onnx", lambda data: data[:-10]),
        ("manifest.json", lambda data: b"{"),
    ],
    ids=["truncated-weights", "flipped-bit", "truncated-graph", "bad-manifest"],
)
def test_a_damaged_model_is_rebuilt_not_used(tmp_path, name, damage):
    model = pathlib.Path(onnx_backend.converted_model(MODEL, str(tmp_path)))
    good = (model.parent / name).read_bytes()
    (model.parent / name).write_bytes(damage(good))
    encoder = SentenceEncoder(MODEL, backend="onnx", cache_dir=tmp_path)
    assert (model.parent / name).read_bytes() == good
    v = encoder.encode(["User is allergic to peanuts"])
    assert np.isclose(np.linalg.norm(v), 1, atol=1e-5)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers


def test_workers_map_the_weights_file_rather_than_copy_it(built):
    """The page cache holds one copy of the large word table for every process."""
    cache, model = built
    encoder = SentenceEncoder(MODEL, backend="onnx", cache_dir=cache)
    weights = os.path.realpath(model.parent / "weights.bin")
    maps = pathlib.Path("/proc/self/maps").read_text()
    assert weights in maps
    assert encoder.encode(["still mapped while in use"]).shape == (1, 384)
