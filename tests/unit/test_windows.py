"""Texts of any length to windows: sentences kept whole, every part of the text in a window."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time

import numpy as np
import pytest

from memsvc.embeddings import InputTooLong
from memsvc.embeddings import windows as windows_module
from memsvc.embeddings.windows import LONG_WINDOWS
from memsvc.embeddings.windows import char_windows
from memsvc.embeddings.windows import document_vectors
from memsvc.embeddings.windows import needed
from memsvc.embeddings.windows import query_vector
from tests.support.helpers import HashEmbedder


def covered(text: str, windows: list[str]) -> bool:
    """Whether every non-space character of ``text`` is inside some window, in order."""
    position, spans = 0, []
    for window in windows:
        start = text.index(window, max(0, position - len(window)))
        spans.append((start, start + len(window)))
        position = start + 1
    inside = np.zeros(len(text), dtype=bool)
    for start, end in spans:
        inside[start:end] = True
    return all(inside[i] or text[i].isspace() for i in range(len(text)))


def test_a_short_text_is_one_window():
    assert char_windows("Alice likes jazz.", 100) == ["Alice likes jazz."]


def test_sentences_are_packed_whole_and_each_window_repeats_the_last_one():
    sentences = [f"Sentence number {i} is here." for i in range(10)]  # 27-28 characters
    text = " ".join(sentences)
    windows = char_windows(text, 60)
    assert windows[0] == f"{sentences[0]} {sentences[1]}"
    assert windows[1] == f"{sentences[1]} {sentences[2]}"
    assert all(len(w) <= 60 for w in windows)
    assert covered(text, windows)
    assert all(w.endswith(".") for w in windows)


def test_a_sentence_longer_than_a_window_is_cut_at_words_with_overlap():
    words = [f"w{i:03d}" for i in range(200)]
    text = " ".join(words)  # one 999-character sentence
    windows = char_windows(text, 100)
    assert all(len(w) <= 100 for w in windows)
    assert all(w.split()[0] in words and w.split()[-1] in words for w in windows)
    for a, b in zip(windows, windows[1:], strict=False):
        assert set(a.split()) & set(b.split())  # they overlap
    assert covered(text, windows)


def test_line_breaks_end_sentences_too():
    text = "first line without a stop\nsecond line without a stop\nthird line"
    assert char_windows(text, 30) == [
        "first line without a stop",
        "second line without a stop",
        "third line",
    ]


def test_the_local_model_keeps_short_texts_whole_and_adds_the_whole_of_a_medium_one(local_embedder):
    short = "Alice is allergic to peanuts."
    assert local_embedder.windows(short) == [short]
    medium = " ".join(f"Fact {i}: the user visited city number {i} last year." for i in range(8))
    windows = local_embedder.windows(medium)
    assert windows[0] == medium and len(windows) > 2
    long = medium * 12  # more than the model's 256 tokens: windows only
    windows = local_embedder.windows(long)
    assert long not in windows and covered(long, windows)
    tokenizer = local_embedder.encoder.tokenizer
    assert max(len(tokenizer.encode(w, add_special_tokens=False).ids) for w in windows) <= 48


class TooLongOver(HashEmbedder):
    """Refuses texts longer than ``limit`` characters, like a provider with a smaller context."""

    def __init__(self, limit: int):
        super().__init__(8)
        self.limit = limit
        self.calls: list[list[str]] = []

    def windows(self, text: str) -> list[str]:
        return [text]

    def embed(self, texts):
        self.calls.append(list(texts))
        if any(len(t) > self.limit for t in texts):
            raise InputTooLong("text is too long for the embedding model: maximum context")
        return super().embed(texts)


def test_a_window_a_provider_finds_too_long_is_halved_until_it_fits():
    embedder = TooLongOver(300)
    text = " ".join(f"word{i}" for i in range(200))  # 1,289 characters
    [vectors] = document_vectors(embedder, [text])
    assert len(vectors) == 8 and np.allclose(np.linalg.norm(vectors, axis=1), 1)


def test_a_short_text_a_provider_refuses_is_not_retried():
    embedder = TooLongOver(5)
    with pytest.raises(InputTooLong):
        document_vectors(embedder, ["a short text"])
    assert len(embedder.calls) == 1


def test_a_long_query_is_the_mean_of_its_windows():
    embedder = HashEmbedder(16)
    embedder.windows = lambda text: ["one", "two"]  # type: ignore[attr-defined]
    vector = query_vector(embedder, "anything")
    mean = embedder.embed(["one", "two"]).astype(np.float64).mean(axis=0)
    assert np.allclose(vector, mean / np.linalg.norm(mean), atol=1e-6)


def test_a_query_a_provider_refuses_whole_is_the_mean_of_its_halves():
    embedder = TooLongOver(300)
    text = " ".join(f"word{i}" for i in range(200))
    vector = query_vector(embedder, text)
    [halves] = document_vectors(embedder, [text])
    mean = halves.astype(np.float64).mean(axis=0)
    assert np.allclose(vector, mean / np.linalg.norm(mean), atol=1e-6)
    short = TooLongOver(5)
    with pytest.raises(InputTooLong):
        query_vector(short, "a short text")
    assert len(short.calls) == 1


def test_a_query_repeating_a_memorys_text_is_one_of_its_vectors(local_embedder):
    medium = " ".join(f"Fact {i}: the user visited city number {i} last year." for i in range(8))
    for text in ("Alice is allergic to peanuts.", medium, medium * 12):
        [stored] = document_vectors(local_embedder, [text])
        query = query_vector(local_embedder, text)
        assert float((stored @ query).max()) == pytest.approx(1.0, abs=1e-6), text[:40]
    [long_vectors] = document_vectors(local_embedder, [medium * 12])
    assert len(long_vectors) == len(local_embedder.windows(medium * 12)) + 1  # and their mean


class GatedEmbedder(HashEmbedder):
    """Counts the embed calls under way at once; calls of many texts wait for ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def windows(self, text: str) -> list[str]:
        words = text.split()
        return [text] if len(words) == 1 else words

    def embed(self, texts):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            if len(texts) > LONG_WINDOWS:
                assert self.gate.wait(10)
            return super().embed(texts)
        finally:
            with self.lock:
                self.now -= 1


def test_a_worker_embeds_one_long_text_at_a_time_and_short_ones_never_wait():
    embedder = GatedEmbedder()
    long_texts = [" ".join(f"w{n}x{i}" for i in range(LONG_WINDOWS + 1)) for n in range(3)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(document_vectors, embedder, [text]) for text in long_texts]
        time.sleep(0.2)
        assert embedder.now == 1  # one long text embedding, two waiting their turn
        # A short text (and a query) meanwhile: not held up.
        assert len(pool.submit(document_vectors, embedder, ["short"]).result(timeout=5)) == 1
        assert pool.submit(query_vector, embedder, "question").result(timeout=5).shape == (16,)
        embedder.gate.set()
        for future in waiting:
            assert len(future.result(timeout=10)[0]) == LONG_WINDOWS + 2  # and their mean
    assert embedder.now == 0


class CuttingEmbedder(HashEmbedder):
    """Cuts a text into its words, counting how often it was asked to."""

    def __init__(self) -> None:
        super().__init__()
        self.cuts = 0

    def windows(self, text: str) -> list[str]:
        self.cuts += 1
        words = text.split()
        return [text] if len(words) == 1 else words


def test_a_call_cuts_its_long_text_once_to_count_and_embed_it():
    embedder = CuttingEmbedder()
    text = " ".join(f"word{i}" for i in range(40))
    assert needed(embedder, text) == 40
    [vectors] = document_vectors(embedder, [text])
    assert len(vectors) == 41 and embedder.cuts == 1  # the windows and their mean
    # Once embedded, not kept: the same text in the next call is cut again.
    assert needed(embedder, text) == 40 and embedder.cuts == 2
    assert needed(embedder, text, query=True) == 40 and embedder.cuts == 2
    assert query_vector(embedder, text).shape == (16,) and embedder.cuts == 2
    # Another embedder's windows are its own.
    assert needed(CuttingEmbedder(), text) == 40 and embedder.cuts == 2


def test_a_text_longer_than_long_chars_is_cut_in_the_thread_for_long_texts():
    class Watching(CuttingEmbedder):
        def windows(self, text):
            self.in_turn = threading.current_thread().name.startswith("memsvc-long-texts")
            return super().windows(text)

    embedder = Watching()
    needed(embedder, "short text")
    assert not embedder.in_turn
    needed(embedder, "word " * (windows_module.LONG_CHARS // 5 + 1))
    assert embedder.in_turn


def test_long_texts_are_embedded_by_a_thread_of_lower_cpu_priority():
    class Niceness(CuttingEmbedder):
        def embed(self, texts):
            self.niceness = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            return super().embed(texts)

    embedder = Niceness()
    here = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    document_vectors(embedder, ["short"])
    assert embedder.niceness == here
    document_vectors(embedder, [" ".join(f"w{i}" for i in range(LONG_WINDOWS + 1))])
    assert embedder.niceness == min(19, here + windows_module.LONG_TEXT_NICENESS)
