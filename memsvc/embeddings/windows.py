"""Texts of any length to vectors: overlapping windows within the model's context.

A memory's text is cut into windows the model takes whole, overlapping by a
quarter, and each window gets its own vector; a memory is then as similar
to a query as its most similar window, so a fact in the last paragraph of a
long memory is found as well as one in the first. Short texts, the usual
case, are one window. A text the model takes whole also gets the vector of
its whole; a longer one gets the mean of its windows' vectors instead. A
query is embedded the same way, as its whole text or that mean, so a query
repeating a memory's text finds that memory with similarity 1.

Embedders cut their own windows (:meth:`.Embedder.windows`): the local
model by its tokens, a remote model by characters, since memsvc cannot
count a remote model's tokens. If a remote provider still finds a window too long, the
window is halved and tried again.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import os
import queue
import re
import threading
import typing as t

import numpy as np

from .base import Embedder
from .base import InputTooLong
from .lane import Lane

_T = t.TypeVar("_T")

#: How many times a window a provider finds too long is halved before giving up.
_MAX_SPLITS = 4
#: A provider that finds a text shorter than this too long is not asked again.
_MIN_SPLIT_CHARS = 200

#: Windows a call may embed without waiting its turn (one call's worth of
#: MEMSVC_RATE_LIMIT_WINDOWS_PER_CALL by default).
LONG_WINDOWS = 16
# A worker embeds one long text at a time, in a thread of its own (see
# :class:`_LongTexts`): CPU for long texts is then one thread's per worker
# whoever sends them, and a short text (a query, the usual memory) never
# waits behind them. Without it, one tenant's ten long texts at once shared
# the cores with another's queries ten to one.

#: A text longer than this is cut into windows in that thread too (see
#: :func:`windows_of`): cutting 65,536 characters took 0.25 s (English) to
#: 1 s (Chinese) of CPU. Ordinary memories and queries are far shorter.
LONG_CHARS = 8192
#: How much lower the CPU priority of that thread is (a nice value added to
#: the process's): the kernel then gives a core to any other call of the
#: machine before it, and long texts take what is left.
LONG_TEXT_NICENESS = 10
#: And the box's workers together embed at most the lane's number at once
#: (:func:`use_lane`): with one per worker, two workers took both cores of
#: a two-core box, and another tenant's query waited for CPU behind them.
_lane: Lane | None = None


def use_lane(lane: Lane | None) -> None:
    """Embed long texts in ``lane``'s places, shared with the box's other processes."""
    global _lane
    _lane = lane


class _LongTexts:
    """A process's thread for long texts: one at a time, at a lower CPU priority.

    A nice value is the kernel's, per thread, and cannot be raised back
    without privileges: the work goes to a thread that keeps it, not to the
    request's thread (which serves every kind of call). The request's
    thread waits for the answer without holding the GIL. A daemon thread of
    its own, not an executor's: an executor refuses work once the
    interpreter begins to exit, and gunicorn's workers finish their calls
    after that.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.SimpleQueue[_Work[t.Any]] = queue.SimpleQueue()

    def run(self, work: t.Callable[[], _T]) -> _T:
        with self._lock:
            if self._pid != os.getpid():  # started in this process: a parent's is not here
                self._queue = queue.SimpleQueue()
                threading.Thread(
                    target=_serve, args=(self._queue,), name="memsvc-long-texts", daemon=True
                ).start()
                self._pid = os.getpid()
        # In the request's context (its trace, its metrics' labels).
        item = _Work(contextvars.copy_context(), work)
        self._queue.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error
        return t.cast(_T, item.result)


class _Work(t.Generic[_T]):
    __slots__ = ("context", "work", "done", "result", "error")

    def __init__(self, context: contextvars.Context, work: t.Callable[[], _T]):
        self.context, self.work = context, work
        self.done = threading.Event()
        self.result: _T | None = None
        self.error: BaseException | None = None


def _serve(work_queue: queue.SimpleQueue[_Work[t.Any]]) -> None:
    _lower_priority()
    while True:
        item = work_queue.get()
        try:
            item.result = item.context.run(_in_lane, item.work)
        except BaseException as e:  # handed to the waiting call, which raises it
            item.error = e
        finally:
            item.done.set()


def _in_lane(work: t.Callable[[], _T]) -> _T:
    lane = _lane
    if lane is None:
        return work()
    with lane.turn():
        return work()


def _lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the lane still holds
        me = threading.get_native_id()
        niceness = os.getpriority(os.PRIO_PROCESS, me)
        os.setpriority(os.PRIO_PROCESS, me, min(19, niceness + LONG_TEXT_NICENESS))


_long_texts = _LongTexts()


def _embed(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """``embedder.embed(texts)``, in the worker's turn for long texts if they are many."""
    if len(texts) > LONG_WINDOWS:
        return _long_texts.run(lambda: embedder.embed(texts))
    return embedder.embed(texts)


class _LastWindows(threading.local):
    """A thread's last text and its windows: a call counts them, then embeds them."""

    embedder: Embedder | None = None
    text: str | None = None
    windows: list[str] = []


_last = _LastWindows()


def windows_of(embedder: Embedder, text: str) -> list[str]:
    """``embedder.windows(text)``, cut once for the two uses of one call.

    A call with a text to embed first counts its windows (to refuse or
    charge it, :func:`needed`) and then embeds them: for a long text the
    cutting (tokenizing it, then packing its sentences) is up to a second
    of CPU, done once. A thread keeps its last long text's until it embeds
    them (:func:`document_vectors`), or its next long text replaces them.
    A text of more than :data:`LONG_CHARS` characters is cut in the lane of
    long texts, as it is embedded: counting the windows of a text refused
    for having too many costs as much CPU as embedding a short one many
    times, and must not take more cores than long texts may.
    """
    last = _last
    if last.embedder is embedder and last.text is not None and last.text == text:
        return last.windows
    if len(text) > LONG_CHARS:
        cut = _long_texts.run(lambda: embedder.windows(text))
    else:
        cut = embedder.windows(text)
    if len(cut) > 1:  # a short text is cut in no time: nothing worth keeping
        last.embedder, last.text, last.windows = embedder, text, cut
    return cut


def needed(embedder: Embedder, text: str, *, query: bool = False) -> int:
    """How many texts embedding ``text`` runs through the model, found without running it.

    A memory's windows (its whole text among them when the model takes it
    whole); a query's, or one when the model takes the query whole (see
    :func:`document_vectors` and :func:`query_vector`). The local model
    tokenizes to know: under a tenth of a second for the longest text, where
    embedding it takes seconds.
    """
    windows = windows_of(embedder, text)
    return 1 if query and windows[0] == text else len(windows)


def document_vectors(embedder: Embedder, texts: t.Sequence[str]) -> list[np.ndarray]:
    """For each text, its unit vectors, ``[vectors, dimensions]``; one call when it can.

    A short text has one; a longer one its whole text's (when the model
    takes it whole) and its windows'; a text longer than the model takes,
    its windows' and their mean.
    """
    pieces = [windows_of(embedder, text) for text in texts]
    _last.text, _last.windows = None, []  # embedded now: kept no longer than the call
    # An embedder whose vectors move a little with their batch-mates (the
    # bundled int8 model: one activation scale per run) embeds a whole text
    # on its own, as a query of that text is: the two then agree exactly.
    alone = not embedder.batch_invariant
    solo = [alone and len(w) > 1 and w[0] == text for text, w in zip(texts, pieces, strict=True)]
    flat = [w for windows, s in zip(pieces, solo, strict=True) for w in windows[s:]]
    try:
        vectors = _embed(embedder, flat)
    except InputTooLong:
        if all(len(w) < _MIN_SPLIT_CHARS for w in flat):
            raise
        # Halving changes how many vectors a text has: window by window.
        return [
            _with_mean(
                text, windows, np.concatenate([_embed_splitting(embedder, w, 0) for w in windows])
            )
            for text, windows in zip(texts, pieces, strict=True)
        ]
    out, start = [], 0
    for text, windows, s in zip(texts, pieces, solo, strict=True):
        part = vectors[start : start + len(windows) - s]
        start += len(windows) - s
        if s:
            part = np.concatenate([embedder.embed([text]), part])
        out.append(_with_mean(text, windows, part))
    return out


def _with_mean(text: str, windows: list[str], vectors: np.ndarray) -> np.ndarray:
    """``vectors``, plus their mean when no window is the whole text."""
    if len(vectors) == 1 or windows[0] == text:
        return vectors
    return np.concatenate([vectors, _mean(vectors)[None, :]])


def _mean(vectors: np.ndarray) -> np.ndarray:
    mean = vectors.astype(np.float64).mean(axis=0)
    return (mean / np.linalg.norm(mean)).astype(np.float32)


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
    before = text.rfind(" ", middle // 2, middle + 1)
    after = text.find(" ", middle, middle + middle // 2)
    near = [i for i in (before, after) if i > 0]
    return min(near, key=lambda i: abs(i - middle)) if near else middle


def query_vector(embedder: Embedder, text: str) -> np.ndarray:
    """One unit vector for a query of any length: its whole text's, or its windows' mean."""
    windows = windows_of(embedder, text)
    if windows[0] != text:
        return document_vectors(embedder, [text])[0][-1]  # the windows' mean
    try:
        return embedder.embed([text])[0]  # the model takes it whole: no windows needed
    except InputTooLong:
        # A provider that counts otherwise: the mean of the windows (or of
        # halves), as for a memory, unless there is nothing worth splitting.
        parts = windows[1:] or windows
        if all(len(w) < _MIN_SPLIT_CHARS for w in parts):
            raise
        return _mean(np.concatenate([_embed_splitting(embedder, w, 0) for w in parts]))


# A sentence ends at ., !, ? (or their full-width forms) before a space, or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n\s*")


def windows(text: str, units: t.Sequence[tuple[int, int]], size: int) -> list[str]:
    """Overlapping windows of ``text`` of at most ``size`` units, whole sentences where they fit.

    ``units`` are the character spans of the text's units, in order: the
    model's tokens, or single characters when a model's tokens are not
    known. Consecutive sentences are packed into a window up to ``size``
    units and the next window repeats the last sentence, so each sentence is
    close to the whole of some window (a fact is not drowned in its
    neighbours); a sentence longer than a window is cut into windows of its
    own that overlap by a quarter, at word boundaries where it can.
    """
    if len(units) <= size:
        return [text]
    starts = [u[0] for u in units]
    pieces: list[tuple[int, int]] = []  # unit ranges
    begin = 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end_char = match.start() if match else len(text)
        first = bisect.bisect_left(starts, begin)
        last = bisect.bisect_left(starts, end_char)
        if last > first:
            pieces += _cut(text, units, first, last, size)
        if match:
            begin = match.end()
    out = []
    i = 0
    while i < len(pieces):
        j = i + 1
        while j < len(pieces) and pieces[j][1] - pieces[i][0] <= size:
            j += 1
        out.append(text[units[pieces[i][0]][0] : units[pieces[j - 1][1] - 1][1]])
        if j == len(pieces):
            break
        i = j - 1 if j - 1 > i else j  # the next window starts with this one's last sentence
    return out


def _cut(
    text: str, units: t.Sequence[tuple[int, int]], first: int, last: int, size: int
) -> list[tuple[int, int]]:
    """Units ``first .. last`` as pieces of at most ``size``, overlapping by a quarter."""
    if last - first <= size:
        return [(first, last)]

    def word_start(i: int) -> bool:
        at = units[i][0]
        return at == 0 or text[at - 1].isspace()

    out = []
    start = first
    while True:
        end = min(start + size, last)
        if end < last:
            back = end
            while back > start + size // 2 and not word_start(back):
                back -= 1
            if word_start(back):
                end = back
        out.append((start, end))
        if end >= last:
            return out
        start = max(start + 1, end - size // 4)
        ahead = start
        while ahead < end and not word_start(ahead):
            ahead += 1
        if ahead < end:  # a word starts in the overlap: begin there
            start = ahead


def char_windows(text: str, size: int) -> list[str]:
    """:func:`windows` by characters, for a model whose tokens memsvc cannot count."""
    if len(text) <= size:
        return [text]
    return windows(text, [(i, i + 1) for i in range(len(text))], size)
