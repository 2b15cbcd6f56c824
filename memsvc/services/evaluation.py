"""Evaluation on a team's own data: how well each search mode and threshold finds what it should.

``memsvc eval FILE`` reads questions, one JSON object a line::

    {"userId": "u-17", "query": "where does Ana work now?", "expected": ["<memory id>", "<text>"]}

``expected`` names the memories that should come back, each by its ``id`` or
by its exact text (as stored, to the character). Every question is searched
as ``memory.search`` would search it (the configured store and embedder,
the user's own memories), in each mode and at each threshold of a sweep,
with the same ``limit``. Nothing is written: no memory, no cache file, no
count.

For each mode, at threshold 0 (the ranking alone): hit@k, the share of
questions with an expected memory among the first k results, and MRR, the
mean of 1 / the rank of the first expected memory (0 when none is in the
answer). For each threshold of the sweep, what a call with that threshold
returns: hit@k, how many results a call keeps on average, and how many of
those are not expected.
"""

from __future__ import annotations

import dataclasses
import json
import typing as t

from .. import clock
from ..embeddings import Embedder
from ..embeddings.cache import CachedEmbedder
from ..errors import BadRequest
from ..search import MODES
from ..store import FullStore
from ..text import InvalidText
from ..text import check_text
from . import memories

#: The hit@k reported (those up to the limit).
KS = (1, 5, 10)
#: The thresholds of the sweep: 0 to 0.7 in steps of 0.05.
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(15))
#: The one shape of a line.
FIELDS = ("userId", "query", "expected")
SHAPE = '{"userId": string, "query": string, "expected": [memory id or exact text, ...]}'


class InvalidQuestions(ValueError):
    """A line of the questions file is not a question; the message names the line."""


@dataclasses.dataclass(frozen=True)
class Question:
    #: Its line in the file (1 is the first).
    line: int
    user_id: str
    query: str
    expected: tuple[str, ...]


def read_questions(
    lines: t.Iterable[str], *, max_user_id_chars: int, max_query_chars: int
) -> list[Question]:
    """The questions of a JSON Lines file; blank lines are skipped.

    :raises InvalidQuestions: naming the first line that is not a question,
        or the file if it holds none.
    """
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        out.append(_question(number, line, max_user_id_chars, max_query_chars))
    if not out:
        raise InvalidQuestions(f"no questions: each line is {SHAPE}")
    return out


def _question(number: int, line: str, max_user_id_chars: int, max_query_chars: int) -> Question:
    def bad(problem: str) -> InvalidQuestions:
        return InvalidQuestions(f"line {number}: {problem}")

    try:
        item = json.loads(line)
    except ValueError as e:
        raise bad(f"not JSON ({e}); each line is {SHAPE}") from None
    if not isinstance(item, dict):
        raise bad(f"not a JSON object; each line is {SHAPE}")
    for name in FIELDS:
        if name not in item:
            raise bad(f"{name} is missing; each line is {SHAPE}")
    unknown = sorted(set(item) - set(FIELDS))
    if unknown:
        raise bad(f"unknown field {unknown[0]!r}; each line is {SHAPE}")
    for name, limit in (("userId", max_user_id_chars), ("query", max_query_chars)):
        value = item[name]
        if not isinstance(value, str):
            raise bad(f"{name} must be a string")
        try:
            check_text(value, limit)
        except InvalidText as e:
            raise bad(f"{name}: {e}") from None
    expected = item["expected"]
    if not isinstance(expected, list) or not expected:
        raise bad("expected must be a non-empty array of memory ids or exact texts")
    for i, value in enumerate(expected):
        if not isinstance(value, str) or not value:
            raise bad(f"expected[{i}] must be a memory id or a memory's exact text (a string)")
    return Question(number, item["userId"], item["query"], tuple(expected))


@dataclasses.dataclass
class Figures:
    """What a set of calls (one mode, one threshold) scored over all questions."""

    hits: dict[int, float]
    mrr: float
    #: Results a call returned, on average, and how many of them were not expected.
    kept: float
    unexpected: float

    def as_json(self) -> dict[str, t.Any]:
        return {
            **{f"hit@{k}": round(v, 4) for k, v in self.hits.items()},
            "mrr": round(self.mrr, 4),
            "kept": round(self.kept, 3),
            "notExpected": round(self.unexpected, 3),
        }


@dataclasses.dataclass
class Report:
    tenant: str
    questions: int
    limit: int
    ks: tuple[int, ...]
    thresholds: tuple[float, ...]
    #: mode -> its figures at threshold 0.
    ranking: dict[str, Figures]
    #: mode -> threshold -> figures.
    sweep: dict[str, dict[float, Figures]]
    #: (line, expected item) that is neither a memory id nor the exact text of
    #: a memory of the question's user: no search can return it.
    missing: list[tuple[int, str]]
    #: (line, mode, rank of the first expected memory or None), at threshold 0.
    ranks: list[tuple[int, str, int | None]]

    def as_json(self) -> dict[str, t.Any]:
        return {
            "tenant": self.tenant,
            "questions": self.questions,
            "limit": self.limit,
            "modes": {
                mode: {
                    "ranking": self.ranking[mode].as_json(),
                    "thresholds": [
                        {"threshold": threshold, **figures.as_json()}
                        for threshold, figures in self.sweep[mode].items()
                    ],
                }
                for mode in self.ranking
            },
            "missing": [{"line": line, "expected": item} for line, item in self.missing],
            "ranks": [
                {"line": line, "mode": mode, "rank": rank} for line, mode, rank in self.ranks
            ],
        }


def evaluate(
    store: FullStore,
    embedder: Embedder,
    tenant: str,
    questions: t.Sequence[Question],
    *,
    limit: int = 10,
    thresholds: t.Sequence[float] = THRESHOLDS,
    modes: t.Sequence[str] = MODES,
    progress: t.Callable[[int, int], None] | None = None,
) -> Report:
    """Search every question in every mode at every threshold; read-only.

    Each call is :func:`memories.search` with no search cache (a cache may
    write snapshot files); the query's vector is computed once per
    question, as a server's query cache would.
    """
    thresholds = sorted({0.0, *thresholds})
    ks = tuple(k for k in KS if k <= limit) or (limit,)
    cached = CachedEmbedder(embedder, 8)
    missing = _missing(store, tenant, questions)
    # mode -> threshold -> per question: (rank of the first expected or None, kept, unexpected)
    outcomes: dict[str, dict[float, list[tuple[int | None, int, int]]]] = {
        mode: {threshold: [] for threshold in thresholds} for mode in modes
    }
    for done, question in enumerate(questions, start=1):
        wanted = set(question.expected)
        for mode in modes:
            for threshold in thresholds:
                try:
                    found = memories.search(
                        store, cached, tenant, question.user_id, question.query, limit,
                        threshold, None, mode=mode,
                    )  # fmt: skip
                except BadRequest as e:  # the query is too long for the model
                    raise InvalidQuestions(f"line {question.line}: query: {e.message}") from None
                flags = [m.memory.id in wanted or m.memory.content in wanted for m in found]
                rank = flags.index(True) + 1 if True in flags else None
                outcomes[mode][threshold].append((rank, len(flags), flags.count(False)))
        if progress is not None:
            progress(done, len(questions))
    sweep = {
        mode: {threshold: _figures(rows, ks) for threshold, rows in by_threshold.items()}
        for mode, by_threshold in outcomes.items()
    }
    ranks = [
        (question.line, mode, outcomes[mode][0.0][i][0])
        for i, question in enumerate(questions)
        for mode in modes
    ]
    return Report(
        tenant=tenant,
        questions=len(questions),
        limit=limit,
        ks=ks,
        thresholds=tuple(thresholds),
        ranking={mode: sweep[mode][0.0] for mode in modes},
        sweep=sweep,
        missing=missing,
        ranks=ranks,
    )


def _figures(rows: list[tuple[int | None, int, int]], ks: tuple[int, ...]) -> Figures:
    n = max(len(rows), 1)
    return Figures(
        hits={k: sum(1 for rank, _, _ in rows if rank is not None and rank <= k) / n for k in ks},
        mrr=sum(1 / rank for rank, _, _ in rows if rank is not None) / n,
        kept=sum(kept for _, kept, _ in rows) / n,
        unexpected=sum(unexpected for _, _, unexpected in rows) / n,
    )


def _missing(
    store: FullStore, tenant: str, questions: t.Sequence[Question]
) -> list[tuple[int, str]]:
    """Expected items that name no memory of the question's user (by id or exact text).

    Each user's memories are read once, keeping only the ids and texts some
    question expects.
    """
    now = clock.now_ms()
    wanted: dict[str, set[str]] = {}
    for question in questions:
        wanted.setdefault(question.user_id, set()).update(question.expected)
    present: dict[str, set[str]] = {}
    with store.read():
        for user_id, items in wanted.items():
            present[user_id] = {
                value
                for _, memory in store.page(tenant, user_id, now)
                for value in (memory.id, memory.content)
                if value in items
            }
    return [
        (question.line, item)
        for question in questions
        for item in question.expected
        if item not in present[question.user_id]
    ]


def best(report: Report, k: int = 5) -> tuple[str, float, Figures]:
    """The mode and threshold with the highest hit@k, then the fewest results not expected."""
    choices = [
        (mode, threshold, figures)
        for mode, by_threshold in report.sweep.items()
        for threshold, figures in by_threshold.items()
    ]
    k = k if k in report.ks else report.ks[-1]
    return max(choices, key=lambda c: (c[2].hits[k], -c[2].unexpected, -_order(c[0]), c[1]))


def _order(mode: str) -> int:
    return MODES.index(mode) if mode in MODES else len(MODES)
