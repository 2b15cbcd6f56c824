"""Texts of any length to vectors: overlapping windows within the model's context.

A memory's text is cut into windows the model takes whole, overlapping by a
quarter, and each window gets its own vector; a memory is then as similar
to a query as its most similar window, so a fact in the last paragraph of a
long memory is found as well as one in the first. Short texts, the usual
case, are one window. A query longer than one window is embedded as the
mean of its windows' vectors.

Embedders cut their own windows (:meth:`windows`): the local model by its
tokens, a remote model by characters, since memsvc cannot count a remote
model's tokens. If a remote provider still finds a window too long, the
window is halved and tried again.
"""

from __future__ import annotations

import typing as t

import numpy as np

from . import Embedder
from . import InputTooLong

#: How many times a window a provider finds too long is halved before giving up.
_MAX_SPLITS = 4
#: A provider that finds a text shorter than this too long is not asked again.
_MIN_SPLIT_CHARS = 200


def windows_of(embedder: Embedder, text: str) -> list[str]:
    cut = getattr(embedder, "windows", None)
    return cut(text) if cut is not None else [text]


def document_vectors(embedder: Embedder, texts: t.Sequence[str]) -> list[np.ndarray]:
    """For each text, its windows' unit vectors, ``[windows, dimensions]``; one call when it can."""
    pieces = [windows_of(embedder, text) for text in texts]
    flat = [window for windows in pieces for window in windows]
    try:
        vectors = embedder.embed(flat)
    except InputTooLong:
        if all(len(w) < _MIN_SPLIT_CHARS for w in flat):
            raise
        # Halving changes how many vectors a text has: window by window.
        return [
            np.concatenate([_embed_splitting(embedder, w, 0) for w in windows])
            for windows in pieces
        ]
    out, start = [], 0
    for windows in pieces:
        out.append(vectors[start : start + len(windows)])
        start += len(windows)
    return out


def _embed_splitting(embedder: Embedder, window: str, depth: int) -> np.ndarray:
    try:
        return embedder.embed([window])
    except InputTooLong:
        if depth >= _MAX_SPLITS or len(window) < _MIN_SPLIT_CHARS:
            raise
        middle = _split_point(window)
        return np.concatenate(
            [
                _embed_splitting(embedder, window[:middle], depth + 1),
                _embed_splitting(embedder, window[middle:], depth + 1),
            ]
        )


def _split_point(text: str) -> int:
    """Near the middle, at a space if there is one close by."""
    middle = len(text) // 2
    space = text.rfind(" ", middle // 2, middle + middle // 2)
    return space if space > 0 else middle


def query_vector(embedder: Embedder, text: str) -> np.ndarray:
    """One unit vector for a query of any length."""
    vectors = document_vectors(embedder, [text])[0]
    if len(vectors) == 1:
        return vectors[0]
    mean = vectors.astype(np.float64).mean(axis=0)
    return (mean / np.linalg.norm(mean)).astype(np.float32)


def char_windows(text: str, size: int) -> list[str]:
    """Windows of at most ``size`` characters overlapping by a quarter, cut at spaces."""
    if len(text) <= size:
        return [text]
    step = size - size // 4
    out = []
    start = 0
    while True:
        end = min(start + size, len(text))
        if end < len(text):
            space = text.rfind(" ", start + step, end)
            if space > start:
                end = space
        out.append(text[start:end])
        if end >= len(text):
            return out
        next_start = max(start + 1, end - size // 4)
        space = text.find(" ", next_start, end)
        start = space + 1 if space != -1 else next_start


def token_windows(
    text: str, offsets: t.Sequence[tuple[int, int]], words: t.Sequence[int | None], size: int
) -> list[str]:
    """Windows of at most ``size`` tokens overlapping by a quarter, starting and ending on words.

    ``offsets`` and ``words`` are the tokenizer's character spans and word
    indices of the text's tokens (no special tokens).
    """
    n = len(offsets)
    if n <= size:
        return [text]

    def word_start(i: int) -> bool:
        return i == 0 or i >= n or words[i] is None or words[i] != words[i - 1]

    out = []
    start = 0
    while True:
        end = min(start + size, n)
        back = end
        while end < n and not word_start(back) and back > start + size // 2:
            back -= 1
        if end < n and word_start(back):
            end = back
        out.append(text[offsets[start][0] : offsets[end - 1][1]])
        if end >= n:
            return out
        start = max(start + 1, end - size // 4)
        while not word_start(start) and start < end:
            start += 1
