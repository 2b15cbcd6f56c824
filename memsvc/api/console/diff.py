"""What changed between two versions of a memory, as runs of kept, removed and added text.

Word by word, with Myers' O(ND) difference algorithm: its work grows with
the texts' length times the number of changes, so for a small edit of a
long text it is little more than reading both. The texts' common beginning
and end are set aside first, compared as strings (no words read), and only
what lies between is read into words and compared. That comparison has a
budget of steps (comparing two words, or moving to the next diagonal) for a
whole page, shared by every version pair on it, newest first; a pair that
would need more than is left, or more than :data:`MAX_CHANGES` changed
words, is not compared word by word: what lies between its common beginning
and end is shown removed and added whole. So a page's history costs at most
:data:`PAGE_STEPS` steps of comparing, plus reading its versions once (work
that grows with their length only), however the versions were made.
"""

from __future__ import annotations

import json
import re
import typing as t

#: ("same" | "del" | "ins", text): shown as plain, struck and marked text.
Run = tuple[str, str]

#: Words: a run of spaces, a run of letters and digits, or any other character.
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
#: The furthest a change is moved up to start where its words start (see :func:`_slide`).
_MOST_SLID = 32
#: What of a common beginning is read into words, for :func:`_slide` to move changes into.
_TAIL_CHARS = 256

#: Steps of comparing one page may take, all its version pairs together
#: (bench/console.py measures what they cost).
PAGE_STEPS = 100_000
#: The most words (and spaces, and punctuation marks) a pair may differ by and
#: still be compared word by word; the comparison's memory grows with its square.
MAX_CHANGES = 300


class Budget:
    """Steps of comparing left to a page."""

    def __init__(self, steps: int = PAGE_STEPS):
        self.left = steps


class Compared(t.NamedTuple):
    runs: list[Run]
    #: False: too many changes to compare word by word (the middle is shown replaced whole).
    word_by_word: bool


def words(before: str, after: str, budget: Budget | None = None) -> Compared:
    """A word-level diff of two texts, within ``budget`` (a fresh page's if None)."""
    budget = budget or Budget()
    start = _common_start(before, after)
    end_a, end_b = _common_end(before, after, start)
    a_middle, b_middle = before[start:end_a], after[start:end_b]
    middle = None
    if budget.left > 0:
        middle = _edits(_TOKENS.findall(a_middle), _TOKENS.findall(b_middle), budget)
    word_by_word = middle is not None
    if middle is None:
        middle = [(kind, [text]) for kind, text in (("del", a_middle), ("ins", b_middle)) if text]
    # The common beginning's last words, where a change may be moved up to (see _slide).
    head = before[:start]
    cut = _boundary_after(head, max(0, start - _TAIL_CHARS)) if start > _TAIL_CHARS else 0
    prefix = ([head[:cut]] if cut else []) + _TOKENS.findall(head[cut:])
    return Compared(_runs(prefix, middle, before[end_a:]), word_by_word)


def _common_start(a: str, b: str) -> int:
    """How long a beginning ``a`` and ``b`` share, ending where words end in both."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # the longest equal beginning, by halves (compared in C)
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    while low and not (_between_words(a, low) and _between_words(b, low)):
        low -= 1
    return low


def _common_end(a: str, b: str, start: int) -> tuple[int, int]:
    """Where the end ``a`` and ``b`` share (after ``start``) begins in each, where words begin."""
    low, high = 0, min(len(a), len(b)) - start
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            low = mid
        else:
            high = mid - 1
    while low and not (_between_words(a, len(a) - low) and _between_words(b, len(b) - low)):
        low -= 1
    return len(a) - low, len(b) - low


def _between_words(text: str, i: int) -> bool:
    """Whether position ``i`` of ``text`` is between two of its words (:data:`_TOKENS`)."""
    if i <= 0 or i >= len(text):
        return True
    x, y = text[i - 1], text[i]
    word_x, word_y = x.isalnum() or x == "_", y.isalnum() or y == "_"
    return not ((x.isspace() and y.isspace()) or (word_x and word_y))


def _boundary_after(text: str, i: int) -> int:
    """The first position from ``i`` on that is between two words of ``text``."""
    while not _between_words(text, i):
        i += 1
    return i


#: A stretch of the edit script: ("same" | "del" | "ins", its tokens).
Segment = tuple[str, list[str]]


def _edits(a: list[str], b: list[str], budget: Budget) -> list[Segment] | None:
    """The shortest edit script from ``a`` to ``b`` (Myers), or None past the budget."""
    n, m = len(a), len(b)
    if not n or not m:
        return [("del", a), ("ins", b)]
    most = min(MAX_CHANGES, n + m)
    offset = most + 1
    v = [0] * (2 * most + 3)
    #: v at the start of each round d, for k in -d..d (index k + d).
    trace: list[list[int]] = []
    left = budget.left
    for d in range(most + 1):
        left -= d + 1
        if left < 0:
            break
        low, high = offset - d, offset + d
        trace.append(v[low : high + 1])
        for i in range(low, high + 1, 2):  # i: diagonal k's index in v, offset + k
            if i == low or (i != high and v[i - 1] < v[i + 1]):
                x = v[i + 1]
            else:
                x = v[i - 1] + 1
            y = x - i + offset
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            left -= x - start
            v[i] = x
            if x >= n and y >= m:
                budget.left = max(left, 0)
                return _backtrack(a, b, trace)
        if left < 0:
            break
    budget.left = 0 if left < 0 else left
    return None


def _backtrack(a: list[str], b: list[str], trace: list[list[int]]) -> list[Segment]:
    """The edit script along the path the rounds in ``trace`` found, first to last."""
    x, y = len(a), len(b)
    segments: list[Segment] = []
    for d in range(len(trace) - 1, 0, -1):
        v, k = trace[d], x - y
        down = k == -d or (k != d and v[k - 1 + d] < v[k + 1 + d])
        previous_k = k + 1 if down else k - 1
        previous_x = v[previous_k + d]
        previous_y = previous_x - previous_k
        # The snake after the step: from just past the inserted or removed token.
        snake_x = previous_x if down else previous_x + 1
        if x > snake_x:
            segments.append(("same", a[snake_x:x]))
        segments.append(("ins", [b[previous_y]]) if down else ("del", [a[previous_x]]))
        x, y = previous_x, previous_y
    if x:
        segments.append(("same", a[:x]))
    segments.reverse()
    return segments


def _runs(prefix: list[str], middle: list[Segment], suffix: str) -> list[Run]:
    """The runs of ``prefix`` kept (its words), the script ``middle``, ``suffix`` kept: each
    change's removed text first, then its added text."""
    # Kept stretches and changes alternate: kept[0], changes[0], kept[1], ... kept[-1].
    kept: list[list[str]] = [prefix]
    changes: list[tuple[list[str], list[str]]] = []
    for kind, tokens in middle:
        if kind == "same":
            if len(kept) == len(changes):
                kept.append([])
            kept[-1].extend(tokens)
        elif tokens:
            if len(changes) < len(kept):
                changes.append(([], []))
            changes[-1][0 if kind == "del" else 1].extend(tokens)
    if len(kept) == len(changes):
        kept.append([])
    if suffix:
        kept[-1].append(suffix)
    for i, (removed, added) in enumerate(changes):
        if not removed or not added:
            _slide(kept[i], removed or added, kept[i + 1])
    runs: list[Run] = []
    removed_run: list[str] = []
    added_run: list[str] = []
    for i, same in enumerate(kept):
        if same:  # a stretch emptied by a slide joins the changes on either side
            if removed_run:
                runs.append(("del", "".join(removed_run)))
            if added_run:
                runs.append(("ins", "".join(added_run)))
            removed_run, added_run = [], []
            runs.append(("same", "".join(same)))
        if i < len(changes):
            removed_run += changes[i][0]
            added_run += changes[i][1]
    if removed_run:
        runs.append(("del", "".join(removed_run)))
    if added_run:
        runs.append(("ins", "".join(added_run)))
    return runs


def _slide(before: list[str], moved: list[str], after: list[str]) -> None:
    """Move a lone insertion (or removal) up while its last token is also the one before it,
    by :data:`_MOST_SLID` tokens at most: a new key of pretty-printed metadata is then shown
    from the start of its line, not from inside its quotes."""
    kept, size = len(before), len(moved)

    def at(i: int) -> str:  # before and moved, read as one list
        return before[i] if i < kept else moved[i - kept]

    slid = 0
    while slid < min(kept, _MOST_SLID) and at(kept + size - 1 - slid) == at(kept - 1 - slid):
        slid += 1
    if slid:
        whole = before[kept - slid :] + moved
        after[:0] = whole[size:]
        moved[:] = whole[:size]
        del before[kept - slid :]


def pretty(metadata: t.Any) -> str:
    return json.dumps(metadata, ensure_ascii=False, indent=2, sort_keys=True)


def versions(
    history: list[dict[str, t.Any]], budget: Budget | None = None
) -> list[dict[str, t.Any]]:
    """Each version (newest first) with its text and metadata diffed against the one before.

    The newest pairs are compared first: when the page's budget runs out,
    it is the oldest that are shown replaced whole.
    """
    budget = budget if budget is not None else Budget()
    shown = [pretty(v["metadata"]) for v in history]
    out = []
    for i in range(len(history) - 1, -1, -1):
        v = history[i]
        content = words(history[i - 1]["content"] if i else "", v["content"], budget)
        changed = i == 0 or history[i - 1]["metadata"] != v["metadata"]
        metadata = words(shown[i - 1] if i else "", shown[i], budget) if changed else None
        whole = content.word_by_word and (metadata is None or metadata.word_by_word)
        out.append(
            {
                **v,
                "content_runs": content.runs,
                "metadata_runs": metadata.runs if metadata else [],
                "metadata_changed": changed,
                "word_by_word": whole,
            }
        )
    return out
