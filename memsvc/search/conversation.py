"""What a conversation and time tell hybrid search beyond a memory's own words.

A message is one turn of a conversation: "Thursday at 7pm then" means
nothing without the turn before it, a question names who said what, a
"when" question is answered by a turn that holds a date, and of two
statements on the same subject the later one holds. Hybrid search
(:mod:`.hybrid`) ranks each candidate by the sum of named parts; these are
the parts beyond ``cosine`` and ``keyword``:

* ``neighbours`` (messages): the keyword strength of the message together
  with the messages just before and after it in its session;
* ``session`` (messages): the keyword strength of its whole session;
* ``speaker`` (messages): the query names who said it ("What did Sam say
  about ...");
* ``cosineWithoutNames`` (messages, when the query names a speaker): part of
  the cosine comes from the query without the names, which dominate a short
  question's vector;
* ``short`` (messages, negative): a turn of three words or fewer ("Lucía?"),
  which a question naming the same person matches by the name alone;
* ``dates`` (messages): a "when" question, and the message holds a date (``dates``);
* ``time``: the query names a time ("last week") and the memory's time or
  one of its dates falls inside it;
* ``recency`` (messages and facts, when the query asks what holds now:
  "now", "still", "currently", "latest"...): the later of the best
  candidates a little higher, by where its time falls between the
  earliest's and the latest's;
* ``newer`` (messages and facts): of two candidates on the same subject (their vectors close,
  the newer holding nearly as much of the query's words, and of its time) whose
  scores are close, the newer is put first, raised just above the older.

The weights (:data:`WEIGHTS`) were chosen on the tune half of make eval's
conversation set and are reported on the other half (docs/performance.md).
Ordinary memories have no session, speaker or position, and are never
reordered by time of writing: they rank by ``cosine`` and ``keyword`` as
before, plus ``time`` when the query names one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import typing as t

import numpy as np

from ..models import DateSpan
from ..models import Memory
from .bm25 import Coverage


@dataclasses.dataclass(frozen=True)
class Weights:
    """How much each part adds to a candidate's score (see the module)."""

    #: An ordinary memory's keyword part: ``keyword * strength ** 2``.
    keyword: float = 0.5
    #: A message's keyword part (its neighbours and session count besides).
    message_keyword: float = 0.29
    neighbours: float = 0.57
    session: float = 0.29
    speaker: float = 0.29
    #: The share of a message's cosine taken from the query without the names.
    without_names: float = 0.7
    short: float = 0.29
    dates: float = 0.29
    time: float = 0.3
    #: The most a candidate gains by being the latest when the query asks what holds now.
    recency: float = 0.3
    #: Candidates whose vectors have at least this cosine speak of the same subject...
    same_subject: float = 0.65
    #: ...and the newer is put first when its score is within this of the older's
    newer_margin: float = 0.43
    #: ...and its keyword strength at most this below the older's (a first
    #: statement often names the subject in full, its update in passing).
    newer_keyword_slack: float = 0.3


#: Chosen on make eval's conversations (tune half), reported on the report half.
WEIGHTS = Weights()

#: How many of the best candidates newer-beats-older compares, pairwise.
NEWER_AMONG = 30

_WHEN = re.compile(
    r"^\W*(when\b|what (day|date|month|year|time)\b|how long\b|which (day|month|year)\b|"
    r"since when\b|until when\b|how many (days|weeks|months|years)\b)",
    re.I,
)


#: Words by which a question asks what holds now, not what once did.
_NOW = re.compile(
    r"\b(now|still|currently|current|latest|these days|nowadays|any ?more|"
    r"at the moment|at present)\b",
    re.I,
)


def asks_now(query: str) -> bool:
    """Whether a question asks what holds now ("Where does Ife work now?", "Is it still...")."""
    return bool(_NOW.search(query))


def asks_when(query: str) -> bool:
    """Whether a question asks when something happened ("When did ...", "How long ...")."""
    return bool(_WHEN.search(query))


def named(query: str, speakers: t.Iterable[str]) -> set[str]:
    """The speakers the query names, as whole words (any case, a possessive too)."""
    return {
        name
        for name in speakers
        if name and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", query, re.I)
    }


def without_names(query: str, names: t.Iterable[str]) -> str:
    """The query with the names (and their possessive 's) left out; the query itself if that
    leaves no word."""
    out = query
    for name in sorted(names, key=len, reverse=True):
        out = re.sub(rf"(?<!\w){re.escape(name)}(['’]s)?(?!\w)", " ", out, flags=re.I)
    out = re.sub(r"\s+", " ", out).strip()
    return out if re.search(r"\w", out) else query


def is_short(text: str) -> bool:
    return len(text.split()) <= 3


def inside(memory: Memory, interval: DateSpan) -> bool:
    """Whether a memory's time (its own calendar day) or one of its dates meets the interval."""
    if memory.dates and any(
        d.start <= interval.end and d.end >= interval.start for d in memory.dates
    ):
        return True
    zone = dt.timezone(dt.timedelta(minutes=memory.offset or 0))
    day = dt.datetime.fromtimestamp(memory.time / 1000, zone).date().isoformat()
    return interval.start <= day <= interval.end


@dataclasses.dataclass
class Candidate:
    """A memory hybrid search is ranking: what it was found with, and its record."""

    seq: int
    memory: Memory
    cosine: float
    #: Its own keyword match's strength (None: it holds no query term).
    strength: float | None
    #: Cosine of the query without the speakers' names (None: the query names none).
    cosine_without_names: float | None = None
    parts: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(self.parts.values())


@dataclasses.dataclass(frozen=True)
class Context:
    """What the parts read beyond a candidate: the query's and the conversations'."""

    coverage: Coverage
    #: Each candidate session's visible messages, ``(position, seq)`` in position order.
    sessions: t.Mapping[str, t.Sequence[tuple[int, int]]]
    speakers_named: frozenset[str]
    when_question: bool
    interval: DateSpan | None
    #: The query asks what holds now (:func:`asks_now`).
    now_question: bool = False


def score(c: Candidate, context: Context, weights: Weights = WEIGHTS) -> None:
    """Set the candidate's parts (see the module)."""
    m = c.memory
    parts = c.parts
    message = m.session_id is not None
    if message and c.cosine_without_names is not None:
        share = weights.without_names
        parts["cosine"] = (1 - share) * c.cosine
        parts["cosineWithoutNames"] = share * c.cosine_without_names
    else:
        parts["cosine"] = c.cosine
    if c.strength is not None:
        weight = weights.message_keyword if message else weights.keyword
        parts["keyword"] = weight * c.strength**2
    if message:
        members = context.sessions.get(m.session_id or "", ())
        if members:
            near = context.coverage.strength(_around(members, c.seq))
            if near:
                parts["neighbours"] = weights.neighbours * near**2
            whole = context.coverage.strength(seq for _, seq in members)
            if whole:
                parts["session"] = weights.session * whole**2
        if m.speaker is not None and m.speaker in context.speakers_named:
            parts["speaker"] = weights.speaker
        if is_short(m.content):
            parts["short"] = -weights.short
        if context.when_question and m.dates:
            parts["dates"] = weights.dates
    if context.interval is not None and inside(m, context.interval):
        parts["time"] = weights.time


def _around(members: t.Sequence[tuple[int, int]], seq: int) -> list[int]:
    """The seqs of a message and the ones just before and after it in its session."""
    for i, (_, s) in enumerate(members):
        if s == seq:
            return [s for _, s in members[max(0, i - 1) : i + 2]]
    return [seq]


def ranked(
    candidates: list[Candidate],
    vectors: t.Callable[[list[int]], np.ndarray],
    weights: Weights = WEIGHTS,
    now_question: bool = False,
) -> list[Candidate]:
    """Best first; then ``recency`` (``now_question``) and newer beats older among the
    :data:`NEWER_AMONG` best.

    A candidate whose score is at most ``newer_margin`` below an older
    candidate on the same subject (cosine of their vectors at least
    ``same_subject``), holding nearly as much of the query's words, is
    raised just above it (its ``newer`` part: by how much), unless the older
    is inside the time the query names and the newer is not. ``vectors(seqs)``:
    the candidates' unit vectors, a row each.
    """
    order = sorted(candidates, key=_order)
    if now_question and _recency(order[:NEWER_AMONG], weights):
        order.sort(key=_order)
    top = order[:NEWER_AMONG]
    if sum(c.memory.kind is not None for c in top) < 2:
        return order  # newer beats older among messages and facts only
    unit = vectors([c.seq for c in top])
    times = np.array([c.memory.time for c in top])
    conversational = np.array([c.memory.kind is not None for c in top])
    strength = np.array([c.strength or 0.0 for c in top])
    timed = np.array(["time" in c.parts for c in top])
    # pairs[i, j]: j may be raised over i (j newer, on the same subject, holding
    # nearly as much of the query's words, and of its time if i is inside it).
    pairs = (
        (times[None, :] > times[:, None])
        & (conversational[:, None] & conversational[None, :])
        & (strength[None, :] + weights.newer_keyword_slack >= strength[:, None])
        & ~(timed[:, None] & ~timed[None, :])
        & (unit @ unit.T >= weights.same_subject)
    )
    eligible = [(int(i), int(j)) for i, j in np.argwhere(pairs)]
    score = [c.score for c in top]
    # A chain (v1, v2, v3 of one fact) settles in a few rounds.
    for _ in range(3):
        moved = False
        for i, j in eligible:
            if score[j] < score[i] <= score[j] + weights.newer_margin:
                score[j] = score[i] + 1e-9
                moved = True
        if not moved:
            break
    for c, new in zip(top, score, strict=True):
        lift = new - c.score
        if lift > 0:
            c.parts["newer"] = lift
    return sorted(order, key=_order)


def _recency(top: list[Candidate], weights: Weights) -> bool:
    """Give the messages and facts among ``top`` their ``recency`` part: ``weights.recency``
    times where each one's time falls between the earliest's (0) and the latest's (1).
    Whether any got one."""
    timed = [c for c in top if c.memory.kind is not None]
    if len(timed) < 2:
        return False
    first = min(c.memory.time for c in timed)
    span = max(c.memory.time for c in timed) - first
    if span <= 0:
        return False
    for c in timed:
        share = (c.memory.time - first) / span
        if share > 0:
            c.parts["recency"] = weights.recency * share
    return True


def _order(c: Candidate) -> tuple[float, int, int]:
    return (-c.score, -c.memory.time, -c.seq)
