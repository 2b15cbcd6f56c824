"""Every embedder says what it can do (the Embedder base class), nothing is probed."""

from __future__ import annotations

import typing as t

import numpy as np
import pytest

from memsvc.embeddings import Embedder
from memsvc.embeddings.openai import OpenAIEmbedder
from memsvc.limits import Limits
from memsvc.services.info import describe

LONG = " ".join(f"Sentence {i} of a long memory." for i in range(200))


class Plain(Embedder):
    """The simplest model: only what every embedder must have."""

    model_id = "test:plain"
    dimensions = 2

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        return np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(texts), 1))

    def warm_up(self) -> None:
        pass


def openai() -> OpenAIEmbedder:
    return OpenAIEmbedder(url="http://127.0.0.1:9", api_key=None, model="m", dimensions=8)


def test_the_defaults_are_the_simplest_models():
    plain = Plain()
    assert plain.windows(LONG) == [LONG]  # taken whole
    assert plain.batch_invariant is True
    assert plain.max_tokens is None
    assert plain.prepare() is None


def test_embed_and_warm_up_cannot_be_left_out():
    class NoWarmUp(Embedder):
        model_id, dimensions = "test:incomplete", 2

        def embed(self, texts: t.Sequence[str]) -> np.ndarray:
            raise AssertionError

    with pytest.raises(TypeError, match="warm_up"):
        NoWarmUp()  # type: ignore[abstract]


@pytest.mark.parametrize("name", ["local", "multilingual"])
def test_the_local_models_cut_by_tokens_and_depend_on_batch_mates(request, name):
    embedder = request.getfixturevalue(f"{name}_embedder")
    assert embedder.batch_invariant is False
    assert embedder.max_tokens == 256
    windows = embedder.windows(LONG)
    assert len(windows) > 1 and all(w in LONG for w in windows)


def test_a_remote_model_cuts_by_characters_and_counts_no_tokens():
    remote = openai()
    assert remote.batch_invariant is True and remote.max_tokens is None
    windows = remote.windows(LONG)
    assert len(windows) > 1 and max(len(w) for w in windows) <= remote.window_chars
    remote.prepare()  # nothing to convert


def test_service_info_states_the_token_limit_only_where_it_is_known(local_embedder):
    settings = {"RECOMMENDED_THRESHOLD": None, "SEARCH_DEFAULT_THRESHOLD": 0.7}
    limits = Limits(100, 10)
    assert describe("v", local_embedder, settings, limits)["embedder"]["maxTokens"] == 256
    assert describe("v", openai(), settings, limits)["embedder"]["maxTokens"] is None
