"""CachedEmbedder: bounded, least-recently-used, thread-safe, read-only to callers."""

import threading

import numpy as np
import pytest

from memsvc.embeddings import Embedder
from memsvc.embeddings import InputTooLong
from memsvc.embeddings.cache import CachedEmbedder


class CountingEmbedder(Embedder):
    """The real model, counting the texts it is asked to embed."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dimensions = embedder.dimensions
        self.batch_invariant = embedder.batch_invariant
        self.calls: list[list[str]] = []
        self.warmed = False

    def embed(self, texts):
        self.calls.append(list(texts))
        return self.embedder.embed(texts)

    def warm_up(self):
        self.warmed = True


@pytest.fixture
def counting(local_embedder):
    return CountingEmbedder(local_embedder)


def test_same_interface_as_the_wrapped_embedder(counting, local_embedder):
    cached = CachedEmbedder(counting, 8)
    assert (cached.model_id, cached.dimensions) == ("local:all-MiniLM-L6-v2", 384)
    cached.warm_up()
    assert counting.warmed
    # And the same capabilities, scoped or not: how it cuts windows, its
    # batch-mates, its token limit.
    long = " ".join(f"Sentence {i} of a long memory." for i in range(20))
    windows = local_embedder.windows(long)
    assert len(windows) > 1
    cache = CachedEmbedder(local_embedder, 8)
    for wrapper in (cache, cache.scoped("tenant")):
        assert wrapper.batch_invariant is local_embedder.batch_invariant is False
        assert wrapper.max_tokens == local_embedder.max_tokens == 256
        assert wrapper.windows(long) == windows


def test_a_repeated_text_is_embedded_once(counting, local_embedder):
    cached = CachedEmbedder(counting, 8)
    first = cached.embed(["What does the user eat?"])
    second = cached.embed(["What does the user eat?"])
    assert counting.calls == [["What does the user eat?"]]
    assert np.array_equal(first, second)
    assert np.array_equal(first, local_embedder.embed(["What does the user eat?"]))
    assert (cached.hits, cached.misses) == (1, 1)


def test_a_batch_embeds_only_its_new_distinct_texts(counting):
    cached = CachedEmbedder(counting, 8)
    cached.embed(["a", "b"])
    out = cached.embed(["b", "c", "c", "a", "d"])
    assert counting.calls == [["a", "b"], ["c", "d"]]
    assert out.shape == (5, 384)
    assert np.array_equal(out[1], out[2])
    assert np.array_equal(out, cached.embed(["b", "c", "c", "a", "d"]))
    assert len(counting.calls) == 2


def test_bounded_by_entry_count_least_recently_used_first(counting):
    cached = CachedEmbedder(counting, 2)
    cached.embed(["a"])
    cached.embed(["b"])
    cached.embed(["a"])  # a is now more recent than b
    cached.embed(["c"])  # evicts b
    assert len(cached) == 2
    counting.calls.clear()
    cached.embed(["a", "c"])
    assert counting.calls == []
    cached.embed(["b"])
    assert counting.calls == [["b"]]
    assert len(cached) == 2


def test_a_batch_larger_than_the_cache_keeps_only_the_bound(counting):
    cached = CachedEmbedder(counting, 3)
    out = cached.embed([f"text {i}" for i in range(10)])
    assert out.shape == (10, 384)
    assert len(cached) == 3


def test_zero_entries_turns_it_off(counting):
    cached = CachedEmbedder(counting, 0)
    cached.embed(["a"])
    cached.embed(["a"])
    assert counting.calls == [["a"], ["a"]]
    assert len(cached) == 0
    with pytest.raises(ValueError):
        CachedEmbedder(counting, -1)


def test_callers_cannot_corrupt_cached_vectors(counting):
    cached = CachedEmbedder(counting, 4)
    first = cached.embed(["a"])
    expected = first.copy()
    first[:] = 0  # the caller's own copy
    assert np.array_equal(cached.embed(["a"]), expected)
    again = cached.embed(["a"])
    again *= 2
    assert np.array_equal(cached.embed(["a"]), expected)


def test_errors_pass_through_and_are_not_cached(counting):
    cached = CachedEmbedder(counting, 4)
    with pytest.raises(InputTooLong):
        cached.embed(["word " * 300])
    assert len(cached) == 0


def test_threads_sharing_a_cache_get_the_right_vectors(counting, local_embedder):
    texts = [f"question number {i}" for i in range(12)]
    expected = dict(zip(texts, local_embedder.embed(texts), strict=True))
    cached = CachedEmbedder(counting, 6)  # smaller than the working set: evictions race
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            start.wait()
            for _ in range(40):
                batch = [texts[i] for i in rng.integers(0, len(texts), 3)]
                for text, vector in zip(batch, cached.embed(batch), strict=True):
                    # Not equal: int8 vectors move a little with batch-mates
                    # (see INT8_BATCH_MIN_COSINE), by more on some CPUs than
                    # the nearest other text is away; so the test is that the
                    # vector is still closest to its own text's of all twelve.
                    scores = {t: float((vector * v).sum()) for t, v in expected.items()}
                    assert max(scores, key=scores.__getitem__) == text, (text, scores)
                    assert scores[text] > 0.95, text
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cached) <= 6
    assert cached.hits + cached.misses == 4 * 40 * 3


def test_scopes_share_nothing(counting):
    """One tenant's queries never make another's faster: each scope has its own entries."""
    cached = CachedEmbedder(counting, 8)
    acme, bravo = cached.scoped("acme"), cached.scoped("bravo")
    first = acme.embed(["What does the user eat?"])
    assert np.array_equal(bravo.embed(["What does the user eat?"]), first)
    assert counting.calls == [["What does the user eat?"]] * 2  # a miss for bravo too
    acme.embed(["What does the user eat?"])
    bravo.embed(["What does the user eat?"])
    assert len(counting.calls) == 2  # and each hits its own from then on
    assert (acme.model_id, acme.dimensions) == (counting.model_id, counting.dimensions)


class CountingWindows(CountingEmbedder):
    """The real model, counting the texts it is asked to cut into windows."""

    def __init__(self, embedder):
        super().__init__(embedder)
        self.cut: list[str] = []

    def windows(self, text):
        self.cut.append(text)
        return self.embedder.windows(text)


def test_windows_are_found_once_per_text_and_scope(local_embedder):
    counting = CountingWindows(local_embedder)
    cached = CachedEmbedder(counting, 2)
    acme, bravo = cached.scoped("acme"), cached.scoped("bravo")
    long = " ".join(f"What did the user say about topic {i}?" for i in range(12))
    expected = local_embedder.windows(long)
    assert len(expected) > 1
    got = acme.windows(long)
    assert got == expected
    got.append("changed by a caller")
    assert acme.windows(long) == expected  # callers cannot change what is kept
    assert counting.cut == [long]
    assert bravo.windows(long) == expected  # another tenant's is its own (a miss)
    assert counting.cut == [long, long]
    # Bounded with the vectors' bound: two entries, least recently used first.
    acme.windows("first"), acme.windows("second")
    assert acme.windows(long) == expected
    assert counting.cut[-1] == long and len(counting.cut) == 5
    # Off with the cache: every call cuts.
    off = CachedEmbedder(counting, 0)
    off.windows(long), off.windows(long)
    assert counting.cut[-2:] == [long, long]
