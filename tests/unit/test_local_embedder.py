import json
import pathlib

import numpy as np
import pytest

from memsvc.embeddings import InputTooLong

REFERENCE = json.loads(
    (pathlib.Path(__file__).parent.parent / "data" / "minilm_reference.json").read_text()
)


def test_matches_sentence_transformers(local_embedder):
    texts = [item["text"] for item in REFERENCE["items"]]
    expected = np.array([item["vector"] for item in REFERENCE["items"]], dtype=np.float32)
    got = local_embedder.embed(texts)
    assert got.shape == (len(texts), 384)
    assert np.abs(got - expected).max() < 1e-5


def test_one_at_a_time_equals_batched(local_embedder):
    texts = [item["text"] for item in REFERENCE["items"]]
    batched = local_embedder.embed(texts)
    single = np.array([local_embedder.embed([t])[0] for t in texts])
    assert np.abs(batched - single).max() < 1e-5


def test_vectors_are_unit_length_float32(local_embedder):
    v = local_embedder.embed(["hello world", "x"])
    assert v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)


def test_related_sentences_score_above_unrelated(local_embedder):
    a, b, c = local_embedder.embed(
        [
            "User is allergic to peanuts",
            "Does the user have any food allergies?",
            "The meeting moved to Thursday afternoon",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2


def test_text_over_the_model_limit_is_refused_not_truncated(local_embedder):
    with pytest.raises(InputTooLong, match="more than its limit of 256"):
        local_embedder.embed(["word " * 300])
    assert local_embedder.model_id == "local:all-MiniLM-L6-v2"
    assert local_embedder.dimensions == 384
