"""What changed between two versions of a memory, as runs of kept, removed and added text.

Word by word, with Myers' O(ND) difference algorithm: its work grows with
the texts' length times the number of changes, so for a small edit of a
long text it is little more than reading both. It is given a budget of
steps (comparisons of two words, or moves to the next diagonal) for a whole
page, shared by every version pair on it, newest first; a pair that would
need more than is left, or more than :data:`MAX_CHANGES` changed words, is
not compared word by word: its common beginning and end are kept, and all
between them is shown struck out and added (work that grows with the texts'
length only). So a page's history costs at most :data:`PAGE_STEPS` steps of
comparing, plus reading its versions once, however the versions were made.
"""

from __future__ import annotations

import json
import re
import typing as t

#: ("same" | "del" | "ins", text): shown as plain, struck and marked text.
Run = tuple[str, str]

_TOKENS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
#: The furthest a change is moved up to start where its words start (see :func:`_slide`).
_MOST_SLID = 32

#: Steps of comparing one page may take, all its version pairs together
#: (about 0.1 s of one core; bench/console.py measures it).
PAGE_STEPS = 1_000_000
#: The most words (and spaces, and punctuation marks) a pair may differ by and
#: still be compared word by word; the comparison's memory grows with its square.
MAX_CHANGES = 500


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
    budget = budget if budget is not None else Budget()
    a, b = _TOKENS.findall(before), _TOKENS.findall(after)
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    middle = _edits(a[start:end_a], b[start:end_b], budget)
    word_by_word = middle is not None
    if middle is None:
        middle = [("del", x) for x in a[start:end_a]] + [("ins", y) for y in b[start:end_b]]
    edits = [("same", x) for x in a[:start]] + middle + [("same", x) for x in a[end_a:]]
    return Compared(_runs(edits), word_by_word)


def _edits(a: list[str], b: list[str], budget: Budget) -> list[tuple[str, str]] | None:
    """The shortest edit script from ``a`` to ``b`` (Myers), or None past the budget."""
    n, m = len(a), len(b)
    if not n or not m:
        return [("del", x) for x in a] + [("ins", y) for y in b]
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
        trace.append(v[offset - d : offset + d + 1])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            left -= x - start
            v[offset + k] = x
            if x >= n and y >= m:
                budget.left = max(left, 0)
                return _backtrack(a, b, trace)
        if left < 0:
            break
    budget.left = 0 if left < 0 else left
    return None


def _backtrack(a: list[str], b: list[str], trace: list[list[int]]) -> list[tuple[str, str]]:
    """The edits along the path the rounds in ``trace`` found, first to last."""
    x, y = len(a), len(b)
    edits: list[tuple[str, str]] = []
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        if d == 0:
            previous_x = previous_y = 0
        else:
            down = k == -d or (k != d and v[k - 1 + d] < v[k + 1 + d])
            previous_k = k + 1 if down else k - 1
            previous_x = v[previous_k + d]
            previous_y = previous_x - previous_k
        while x > previous_x and y > previous_y:
            x, y = x - 1, y - 1
            edits.append(("same", a[x]))
        if d > 0:
            if x == previous_x:
                edits.append(("ins", b[previous_y]))
            else:
                edits.append(("del", a[previous_x]))
        x, y = previous_x, previous_y
    edits.reverse()
    return edits


def _runs(edits: list[tuple[str, str]]) -> list[Run]:
    """Edits as runs: each change's removed text first, then its added text."""
    # Kept stretches and changes alternate: kept[0], changes[0], kept[1], ... kept[-1].
    kept: list[list[str]] = [[]]
    changes: list[tuple[list[str], list[str]]] = []
    for kind, token in edits:
        if kind == "same":
            if len(kept) == len(changes):
                kept.append([])
            kept[-1].append(token)
        else:
            if len(changes) < len(kept):
                changes.append(([], []))
            changes[-1][0 if kind == "del" else 1].append(token)
    if len(kept) == len(changes):
        kept.append([])
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
    out = []
    for i in range(len(history) - 1, -1, -1):
        v, previous = history[i], history[i - 1] if i else None
        content = words(previous["content"] if previous else "", v["content"], budget)
        changed = previous is None or previous["metadata"] != v["metadata"]
        metadata = (
            words(pretty(previous["metadata"]) if previous else "", pretty(v["metadata"]), budget)
            if changed
            else Compared([], True)
        )
        out.append(
            {
                **v,
                "content_runs": content.runs,
                "metadata_runs": metadata.runs,
                "metadata_changed": changed,
                "word_by_word": content.word_by_word and metadata.word_by_word,
            }
        )
    return out
