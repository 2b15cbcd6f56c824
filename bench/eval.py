"""Retrieval quality end to end: does memory.search find the memory that answers a question?

Workload: the labelled sets in tests/data/eval (see its README):
  - facts: 49 end users holding 6 to 56 memories each (742 in all), and 420
    questions, each tagged with a category (paraphrase, exact term,
    near-miss distractors, non-English, cross-lingual) and the memories that
    answer it;
  - conversations: 12 end users' multi-session conversations, every dialogue
    turn one memory (2,652 in all), and 640 questions (single fact,
    temporal, multi-hop, updated fact, paraphrase, open-domain) labelled
    with the turns that answer them; half the users are for tuning ranking,
    the other half for reporting it (``--split``);
  - near-miss: 10 end users (250 memories) and 69 questions hinging on a
    name, code, number or date, each answer among six look-alikes.

Everything goes through memsvc's API, as a client would use it: a fresh app
on a temporary database (``create_app``, rate and concurrency limits off),
Flask's test client, one API key. Every memory of the facts and near-miss
sets is stored with its own ``memory.add`` call; the conversations are
stored as an application hands them over, one ``memory.ingest`` call per
session, each turn a message with its speaker (``name``), its role, the
set's turn id as its ``id`` and its time (``at``: the session's start
plus a minute per turn before it), its text alone as the content. Then
every question is asked with ``memory.search``, threshold 0 and limit 10,
a conversation's with ``now`` a day after its last session began if the
server takes ``now``. That is done in the default (semantic) mode and, if
the server supports search modes, in ``keyword`` and ``hybrid`` as well;
support for modes and for ``now`` is detected from the server's answers,
not assumed.

For the facts set, with the configured embedder (the bundled local model
unless MEMSVC_* says otherwise) and each mode, it prints per category, for
the English questions together, and for the non-English and cross-lingual
ones apart, also by the question's language:
  - recall@1 and recall@5: how often an answer is the first result / in the
    first five (a question with several answers counts its best-ranked one);
  - MRR over the 10 results (0 for a question none of whose answers came back);
  - the share of related (question, answer) pairs whose similarity is
    >= 0.3, 0.5, 0.7 (an answer not among the 10 results counts as below),
    and the share of unrelated pairs (the other memories returned) above
    the same thresholds, i.e. what a threshold would let through;
  - exact-term questions split into codes and numbers vs names and words;
  - recall and MRR by chance, with each user's memories in random order:
    a user with 6 memories makes recall@5 easy, and this says how easy.
Then, from the semantic results on English questions (``--sweep all``: on
every question, for a multilingual model), the threshold that maximises
(related kept - unrelated passed), rounded to 0.05.

For the conversations and near-miss sets it prints, per category and for
all questions, hit@1, hit@5, hit@10 and MRR of each mode next to a plain
Okapi BM25 computed here over each user's memories (bench.bm25; a
conversation turn as ``[<session date>] <speaker>: <text>``, as a caller
that keeps who spoke and when in the text would store it), the ratio
of hybrid's hit@5 to BM25's, how often every evidence turn of a question
with several is in the top 10, and how often the first result is one of the
question's decoys (a superseded statement; a look-alike).

    python -m bench.eval [--set NAME ...] [--limit-users N] [--json PATH]  # or: make eval
    python -m bench.eval --set conversations --json out.json     # one set, every figure
    python -m bench.eval --set conversations --split report      # the half not tuned on
    python -m bench.eval_multilingual      # all of it with MEMSVC_LOCAL_MODEL=multilingual
    MEMSVC_EMBEDDER=openai MEMSVC_EMBEDDING_URL=... \
        MEMSVC_EMBEDDING_API_KEY=... python -m bench.eval      # another embedder

Only a full run (no --set, --split, --data or --limit-users) is saved to
bench/results/eval.txt. With the bundled model on 2 cores a full run takes
about a minute; the adds vary most (7 to 90 ms each), with whatever else the
machine is doing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import json
import math
import os
import pathlib
import re
import sys
import tempfile
import time
import typing as t

import numpy as np

from bench import bm25
from bench.report import recording

if t.TYPE_CHECKING:
    from flask import Flask

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "eval"
TENANT = "eval"
LIMIT = 10
THRESHOLDS = (0.3, 0.5, 0.7)
CATEGORIES = ("paraphrase", "exact", "distractor", "non_english", "cross_lingual")
# Reported apart, and by the question's language: the default model is
# English-only, so these would drag the overall figures (and the
# recommended threshold) down for a known reason.
SEPARATE = ("non_english", "cross_lingual")
MODES = ("semantic", "keyword", "hybrid")
# memory.search's threshold when the caller gives none.
DEFAULT_THRESHOLD = 0.7
#: Every set, in the order they run and print: "facts" (the files in DATA,
#: the figures above) and the sets of RANKED (below).
SETS = ("facts", "conversations", "near-miss")
#: The conversation set's halves: ranking weights are chosen on "tune" and
#: reported on "report" (each file's first record says which).
SPLITS = ("tune", "report")


@dataclasses.dataclass(frozen=True)
class Question:
    user: str
    id: str
    category: str
    text: str
    answers: frozenset[str]
    near_misses: frozenset[str]
    candidates: int  # how many memories the user holds
    term: str | None = None
    language: str | None = None  # the question's, in the SEPARATE categories


@dataclasses.dataclass(frozen=True)
class Turn:
    """One turn of a conversation, as the speaker said it."""

    id: str  # the set's id: "s4t2"
    speaker: str
    role: str  # memory.ingest's role: "user" for a person, "assistant" for the assistant
    text: str


@dataclasses.dataclass(frozen=True)
class Session:
    id: str
    at: str  # when it began: ISO 8601 with a time of day and a UTC offset
    turns: tuple[Turn, ...]


@dataclasses.dataclass
class User:
    id: str
    memories: dict[str, str]  # local id -> content
    questions: list[Question]
    #: Of a conversation set's user: the sessions in order, which speaker is
    #: the end user, and the half of the set ("tune" or "report") it is in.
    sessions: list[Session] = dataclasses.field(default_factory=list)
    speaker: str | None = None
    split: str | None = None


@dataclasses.dataclass(frozen=True)
class Hit:
    memory: str  # local id
    similarity: float
    matched_by: tuple[str, ...] | None


def load(directory: pathlib.Path, prefix: str = "") -> list[User]:
    """Every user of the set, in file-name order; ``prefix`` goes before each user id."""
    users = []
    for path in sorted(directory.glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        memories = {r["id"]: r["content"] for r in records if r["kind"] == "memory"}
        questions = [
            Question(
                prefix + path.stem,
                r["id"],
                r["category"],
                r["question"],
                frozenset(r["answers"]),
                frozenset(r.get("near_misses", ())),
                len(memories),
                r.get("term"),
                r.get("language"),
            )
            for r in records
            if r["kind"] == "question"
        ]
        users.append(User(prefix + path.stem, memories, questions))
    return users


def turn_content(session: Session, turn: Turn) -> str:
    """A turn as one text that says who said it and when: ``[<session date>] <speaker>: <text>``.

    What the BM25 baseline reads: a caller storing each turn with
    ``memory.add`` has to put the speaker and date in the text.
    """
    return f"[{session.at[:10]}] {turn.speaker}: {turn.text}"


def turn_time(session: Session, position: int) -> str:
    """When the turn at ``position`` (from 0) was said: a minute per turn after its session began.

    The set gives a session's start only; the session's UTC offset is kept,
    as memory.ingest keeps it for the dates a message names.
    """
    start = datetime.datetime.fromisoformat(session.at)
    return (start + datetime.timedelta(minutes=position)).isoformat()


def messages(session: Session) -> list[dict[str, str]]:
    """A session's turns as memory.ingest's messages: the text alone, speaker and time apart."""
    return [
        {
            "id": turn.id,
            "role": turn.role,
            "name": turn.speaker,
            "content": turn.text,
            "at": turn_time(session, position),
        }
        for position, turn in enumerate(session.turns)
    ]


def asked_at(user: User) -> str:
    """The ``now`` a conversation's questions are asked at: a day after its last session began."""
    last = datetime.datetime.fromisoformat(user.sessions[-1].at)
    return (last + datetime.timedelta(days=1)).isoformat()


def load_conversations(directory: pathlib.Path, prefix: str = "") -> list[User]:
    """Every user of a conversation set: each turn a memory, each question's evidence its answers.

    ``memories`` holds each turn as ``turn_content`` (the session's date
    and the speaker before the words), the text the BM25 baseline reads;
    memsvc is given the sessions (``messages``). An ``updated`` question's
    superseded turns are its near misses: what a search answers with when
    it prefers the stale statement.
    """
    users = []
    for path in sorted(directory.glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        header = next(r for r in records if r["kind"] == "conversation")
        turns: dict[str, list[Turn]] = collections.defaultdict(list)
        for r in records:
            if r["kind"] == "turn":
                role = header["roles"][r["speaker"]]
                turns[r["session"]].append(Turn(r["id"], r["speaker"], role, r["text"]))
        sessions = [
            Session(r["id"], r["date"], tuple(turns[r["id"]]))
            for r in records
            if r["kind"] == "session"
        ]
        memories = {turn.id: turn_content(s, turn) for s in sessions for turn in s.turns}
        questions = [
            Question(
                prefix + path.stem,
                r["id"],
                r["category"],
                r["question"],
                frozenset(r["evidence"]),
                frozenset(r.get("superseded", ())),
                len(memories),
            )
            for r in records
            if r["kind"] == "question"
        ]
        users.append(
            User(
                prefix + path.stem,
                memories,
                questions,
                sessions,
                speaker=header["user"],
                split=header["split"],
            )
        )
    return users


@dataclasses.dataclass(frozen=True)
class RankedSet:
    """A set scored by hit@k and MRR per category, every mode next to the BM25 baseline."""

    directory: pathlib.Path
    #: In the order printed, with their labels; adding one is adding a line here.
    categories: dict[str, str]
    load: t.Callable[[pathlib.Path, str], list[User]]
    #: What a question's near misses are, for the line saying how often one came first.
    decoys: str


RANKED = {
    "conversations": RankedSet(
        DATA / "conversations",
        {
            "single_fact": "single fact",
            "temporal": "temporal",
            "multi_hop": "multi-hop",
            "updated": "updated fact",
            "paraphrase": "paraphrase",
            "open_domain": "open-domain",
        },
        load_conversations,
        decoys="a superseded statement",
    ),
    "near-miss": RankedSet(
        DATA / "near-miss",
        {"name": "name", "code": "code", "number": "number", "date": "date"},
        load,
        decoys="a look-alike",
    ),
}


def spread(users: list[User], n: int) -> list[User]:
    """``n`` users taken evenly over the set, so a short run still sees large and small ones."""
    if n >= len(users):
        return users
    return [users[i * len(users) // n] for i in range(n)]


# -- memsvc, through its API --------------------------------------------------


@contextlib.contextmanager
def memsvc_app(directory: str, database: str | None = None) -> t.Iterator[Flask]:
    """A fresh memsvc on a database in ``directory`` (or ``database``, e.g. an empty
    PostgreSQL database), configured from MEMSVC_* as usual.

    Rate and concurrency limits are off: the run makes about a thousand calls
    on one key as fast as it can, which is not what the limits are for.
    """
    from memsvc import create_app

    app = create_app(
        {
            "DATABASE": database or os.path.join(directory, "eval.sqlite3"),
            "LIMITS_DIR": os.path.join(directory, "limits"),
            "RATE_LIMIT_PER_MINUTE": 0,
            "CONCURRENCY_LIMIT": 0,
        },
        instance_path=os.path.join(directory, "instance"),
    )
    try:
        yield app
    finally:
        app.extensions["memsvc"].backend.disconnect()


def create_api_key(app: Flask) -> str:
    """A new API key's secret for TENANT.

    memsvc has no API to make the first key without an identity provider, so
    this calls the service layer; the one place to change when it moves.
    """
    from memsvc.api.context import store
    from memsvc.services import keys

    with app.app_context():
        return keys.create(store(), TENANT, "eval", app.config["API_KEY_WORD"]).secret


def embedder_name(app: Flask) -> tuple[str, int]:
    """The configured embedder's model id and dimensions."""
    embedder = app.extensions["memsvc"].embedder
    return embedder.model_id, embedder.dimensions


class ApiError(RuntimeError):
    pass


class Api:
    """memory.add, memory.ingest and memory.search over HTTP, as a tRPC client sends them."""

    def __init__(self, app: Flask, secret: str):
        self.client = app.test_client()
        self.headers = {"x-api-key": secret}

    def add(self, user: str, content: str) -> str:
        """Store a memory; its server-side id."""
        resp = self.client.post(
            "/trpc/memory.add", json={"userId": user, "content": content}, headers=self.headers
        )
        if resp.status_code != 200:
            raise ApiError(f"memory.add: {resp.status_code} {resp.get_data(as_text=True)}")
        return resp.get_json()["result"]["data"]["id"]

    def ingest(
        self, user: str, session: str, messages: list[dict[str, str]]
    ) -> list[dict[str, t.Any]]:
        """Store a session's messages; the memories stored, one per message, in order."""
        resp = self.client.post(
            "/trpc/memory.ingest",
            json={"userId": user, "sessionId": session, "messages": messages},
            headers=self.headers,
        )
        if resp.status_code != 200:
            raise ApiError(f"memory.ingest: {resp.status_code} {resp.get_data(as_text=True)}")
        return t.cast(list[dict[str, t.Any]], resp.get_json()["result"]["data"]["memories"])

    def search(
        self, user: str, query: str, mode: str | None = None, now: str | None = None
    ) -> tuple[int, t.Any]:
        """The status and body of a search with threshold 0 and limit LIMIT."""
        params: dict[str, t.Any] = {"userId": user, "query": query, "limit": LIMIT, "threshold": 0}
        if mode is not None:
            params["mode"] = mode
        if now is not None:
            params["now"] = now
        resp = self.client.get(
            "/trpc/memory.search",
            query_string={"input": json.dumps(params)},
            headers=self.headers,
        )
        return resp.status_code, resp.get_json()

    def results(
        self, user: str, query: str, mode: str | None, now: str | None = None
    ) -> list[dict[str, t.Any]]:
        status, body = self.search(user, query, mode, now)
        if status != 200:
            raise ApiError(f"memory.search (mode {mode}): {status} {body}")
        return t.cast(list[dict[str, t.Any]], body["result"]["data"])


def modes_unsupported(api: Api, user: str, query: str) -> str | None:
    """Why keyword and hybrid search look unsupported, or None if the server has modes.

    A server with modes rejects one it does not know (400), and marks what
    keyword search found with ``matchedBy``; one without modes drops the
    unknown ``mode`` field and answers as usual.
    """
    status, _ = api.search(user, query, mode="no-such-mode")
    if status == 400:
        return None
    status, body = api.search(user, query, mode="keyword")
    if status == 200 and any("matchedBy" in r for r in body["result"]["data"]):
        return None
    return (
        f'the server ignores "mode" (an unknown mode got {status}, not 400, '
        "and keyword results carry no matchedBy)"
    )


def now_unsupported(api: Api, user: str, query: str, now: str) -> str | None:
    """Why memory.search looks unable to take ``now``, or None if it takes it.

    A server that drops unknown input fields (as memsvc does) answers a
    ``now`` it does not know like any search, so the probe sends one that is
    no time: a server that reads ``now`` refuses it with a 400 naming it.
    A 400 naming a real ``now`` means the server refuses the field itself.
    """
    status, body = api.search(user, query, now=now)
    if status == 400 and names_now(body):
        return f'the server refuses "now": {error_message(body)}'
    status, body = api.search(user, query, now="no-such-time")
    if status == 400 and names_now(body):
        return None
    return f'the server ignores "now" (a "now" that is no time got {status}, not 400)'


def error_message(body: t.Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message", "")) if isinstance(error, dict) else ""


def names_now(body: t.Any) -> bool:
    return re.search(r"\bnow\b", error_message(body)) is not None


# -- figures ------------------------------------------------------------------


def rank_of(question: Question, hits: list[Hit]) -> int | None:
    """1-based rank of the best-ranked answer among the hits, None if none came back."""
    for i, hit in enumerate(hits, 1):
        if hit.memory in question.answers:
            return i
    return None


def figures(questions: list[Question], hits: dict[Question, list[Hit]]) -> dict[str, t.Any]:
    """Recall, MRR and similarity shares for a group of questions."""
    if not questions:
        return {"questions": 0}
    ranks = [rank_of(q, hits[q]) for q in questions]
    related, unrelated = pair_similarities(questions, hits)
    out: dict[str, t.Any] = {
        "questions": len(questions),
        "recall_at_1": share(r is not None and r <= 1 for r in ranks),
        "recall_at_5": share(r is not None and r <= 5 for r in ranks),
        "mrr": sum(1 / r for r in ranks if r is not None) / len(ranks),
        "missed_at_10": share(r is None for r in ranks),
        "related_pairs": len(related),
        "related_at": {str(th): share(s >= th for s in related) for th in THRESHOLDS},
        "unrelated_pairs": len(unrelated),
        "unrelated_at": {str(th): share(s >= th for s in unrelated) for th in THRESHOLDS},
    }
    out["chance"] = {
        "recall_at_1": float(np.mean([chance_recall(q, 1) for q in questions])),
        "recall_at_5": float(np.mean([chance_recall(q, 5) for q in questions])),
        "mrr": float(np.mean([chance_mrr(q) for q in questions])),
    }
    with_near = [q for q in questions if q.near_misses]
    if with_near:
        # When the first result is wrong, is it one of the listed look-alikes?
        out["near_miss_first"] = share(
            bool(hits[q]) and hits[q][0].memory in q.near_misses for q in with_near
        )
    return out


def by_language(questions: list[Question], hits: dict[Question, list[Hit]]) -> dict[str, t.Any]:
    """Figures of the SEPARATE categories by the question's language: ``"non_english:de"``."""
    groups: dict[str, list[Question]] = collections.defaultdict(list)
    for q in questions:
        if q.category in SEPARATE:
            groups[f"{q.category}:{q.language}"].append(q)
    return {key: figures(group, hits) for key, group in sorted(groups.items())}


def chance_recall(q: Question, k: int) -> float:
    """Recall@k if the user's memories came back in random order.

    Small users make recall@5 easy: with 6 memories, 5 results hold an
    answer 5 times in 6 by luck alone. This is the baseline to read it against.
    """
    n, a = q.candidates, len(q.answers)
    return 1 - math.comb(n - a, k) / math.comb(n, k) if k <= n else 1.0


def chance_mrr(q: Question) -> float:
    """MRR over the first LIMIT results if the user's memories came back in random order."""
    n, a = q.candidates, len(q.answers)
    # The best-ranked of a answers is at rank i with probability C(n-i, a-1) / C(n, a).
    return sum(math.comb(n - i, a - 1) / math.comb(n, a) / i for i in range(1, min(n, LIMIT) + 1))


def pair_similarities(
    questions: list[Question], hits: dict[Question, list[Hit]]
) -> tuple[list[float], list[float]]:
    """Similarities of related pairs (-inf for an answer not returned) and of unrelated ones."""
    related, unrelated = [], []
    for q in questions:
        found = {h.memory: h.similarity for h in hits[q]}
        related.extend(found.get(a, -math.inf) for a in sorted(q.answers))
        unrelated.extend(h.similarity for h in hits[q] if h.memory not in q.answers)
    return related, unrelated


def share(flags: t.Iterable[bool]) -> float:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else 0.0


def best_threshold(related: list[float], unrelated: list[float]) -> dict[str, float]:
    """The threshold that maximises (related kept - unrelated passed).

    The score only changes at observed similarities; the best one found is
    the top of a range of equally good thresholds, and the middle of that
    range is rounded to 0.05.
    """
    rel = np.sort(np.asarray(related, dtype=float))
    unrel = np.sort(np.asarray(unrelated, dtype=float))
    candidates = np.unique(np.concatenate([rel[np.isfinite(rel)], unrel, [0.0]]))
    kept = (len(rel) - np.searchsorted(rel, candidates, "left")) / max(len(rel), 1)
    passed = (len(unrel) - np.searchsorted(unrel, candidates, "left")) / max(len(unrel), 1)
    i = int(np.argmax(kept - passed))
    low = candidates[i - 1] if i > 0 else 0.0
    middle = (low + candidates[i]) / 2
    return {
        "similarity": float(candidates[i]),
        "related_kept": float(kept[i]),
        "unrelated_passed": float(passed[i]),
        "recommended": round(round(middle * 20) / 20, 2),
    }


def sweep(related: list[float], unrelated: list[float]) -> list[dict[str, float]]:
    rows = []
    for th in np.round(np.arange(0.10, 0.801, 0.05), 2):
        kept = share(s >= th for s in related)
        passed = share(s >= th for s in unrelated)
        rows.append({"threshold": float(th), "related_kept": kept, "unrelated_passed": passed})
    return rows


# -- the other sets: hit@k and MRR, next to BM25 -------------------------------

#: The name of the plain BM25 baseline among the modes (bench.bm25).
BASELINE = "bm25"
HIT_AT = (1, 5, 10)


def bm25_baseline(users: list[User]) -> dict[Question, list[Hit]]:
    """Every question of ``users`` answered by plain BM25 over its own user's memories.

    A result's ``similarity`` is its BM25 score.
    """
    out = {}
    for user in users:
        ids = list(user.memories)
        index = bm25.Index([user.memories[i] for i in ids])
        for q in user.questions:
            out[q] = [Hit(ids[i], score, None) for i, score in index.search(q.text, LIMIT)]
    return out


def ranked(questions: list[Question], hits: t.Mapping[Question, list[Hit]]) -> dict[str, t.Any]:
    """hit@1, @5, @10 and MRR of a group of questions, and how their decoys fared.

    hit@k: an answer (any one of several) is among the first k results. MRR:
    1 / the best answer's rank, 0 if none is in the 10 results. For
    questions with several answers, how often all of them are in the 10;
    for those with listed decoys (``near_misses``), how often one came first.
    """
    out: dict[str, t.Any] = {"questions": len(questions)}
    if not questions:
        return out
    ranks = [rank_of(q, hits[q]) for q in questions]
    for k in HIT_AT:
        out[f"hit_at_{k}"] = share(r is not None and r <= k for r in ranks)
    out["mrr"] = sum(1 / r for r in ranks if r is not None) / len(ranks)
    several = [q for q in questions if len(q.answers) > 1]
    out["several_answers"] = len(several)
    if several:
        out["all_answers_at_10"] = share(q.answers <= {h.memory for h in hits[q]} for q in several)
    with_decoys = [q for q in questions if q.near_misses]
    out["with_decoys"] = len(with_decoys)
    if with_decoys:
        out["decoy_first"] = share(
            bool(hits[q]) and hits[q][0].memory in q.near_misses for q in with_decoys
        )
    return out


def ranked_figures(
    spec: RankedSet, users: list[User], hits: t.Mapping[str, t.Mapping[Question, list[Hit]]]
) -> dict[str, t.Any]:
    """Every figure of one set, for each mode that ran and the BM25 baseline."""
    questions = [q for u in users for q in u.questions]
    methods: dict[str, t.Any] = {}
    for method, method_hits in hits.items():
        methods[method] = {
            "categories": {
                c: ranked([q for q in questions if q.category == c], method_hits)
                for c in spec.categories
            },
            "all": ranked(questions, method_hits),
            "questions": [
                {
                    "user": q.user,
                    "id": q.id,
                    "category": q.category,
                    "rank": rank_of(q, method_hits[q]),
                    "results": [[h.memory, round(h.similarity, 4)] for h in method_hits[q]],
                }
                for q in questions
            ],
        }
    ratios: dict[str, float | None] = {}
    if "hybrid" in methods:
        for key in [*spec.categories, "all"]:
            hybrid, base = (group(methods[m], key) for m in ("hybrid", BASELINE))
            ratios[key] = hybrid["hit_at_5"] / base["hit_at_5"] if base.get("hit_at_5") else None
    return {
        "dataset": {
            "users": len(users),
            "memories": sum(len(u.memories) for u in users),
            "questions": dict(collections.Counter(q.category for q in questions)),
        },
        "methods": methods,
        "hybrid_over_bm25_hit_at_5": ratios,
    }


def group(method: dict[str, t.Any], key: str) -> dict[str, t.Any]:
    """One category's figures of a method, or all questions' (``key`` "all")."""
    return t.cast(dict[str, t.Any], method["all"] if key == "all" else method["categories"][key])


# -- the run ------------------------------------------------------------------


def run(
    users: list[User],
    database: str | None = None,
    ranked: t.Mapping[str, list[User]] | None = None,
    sweep_on: str = "english",
) -> dict[str, t.Any]:
    """Store every memory, ask every question in every supported mode; all figures.

    A user with sessions (a conversation) is stored with a memory.ingest
    call per session, any other with a memory.add per memory, and each
    server id is mapped back to the set's id. ``users`` are the facts set's
    (none to leave it out); ``ranked`` maps the name of each other set to
    run to its users. One server holds them all. ``sweep_on``: the facts
    questions the threshold sweep counts, ``"english"`` or ``"all"``.
    """
    questions = [q for u in users for q in u.questions]
    ranked = dict(ranked or {})
    others = [u for set_users in ranked.values() for u in set_users]
    asked = questions + [q for u in others for q in u.questions]
    seconds: dict[str, t.Any] = {}
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="memsvc-eval-") as tmp,
        memsvc_app(tmp, database) as app,
    ):
        model_id, dimensions = embedder_name(app)
        api = Api(app, create_api_key(app))
        seconds["setup"] = time.perf_counter() - started

        local_id: dict[str, str] = {}  # server id -> the set's id
        seconds["add"] = seconds["ingest"] = 0.0
        for user in users + others:
            mark = time.perf_counter()
            if user.sessions:
                for session in user.sessions:
                    stored = api.ingest(user.id, session.id, messages(session))
                    # Each message comes back with the id it was sent with.
                    local_id.update((m["id"], m["messageId"]) for m in stored)
                seconds["ingest"] += time.perf_counter() - mark
            else:
                for memory_id, content in user.memories.items():
                    local_id[api.add(user.id, content)] = memory_id
                seconds["add"] += time.perf_counter() - mark

        probe = next((q for q in asked if q.category == "exact"), asked[0])
        why_not = modes_unsupported(api, probe.user, probe.text)
        modes = MODES if why_not is None else MODES[:1]
        # A conversation's questions are asked a day after its last session.
        now: dict[str, str] = {}
        conversing = [u for u in others if u.sessions and u.questions]
        why_no_now = None
        if conversing:
            first = conversing[0]
            why_no_now = now_unsupported(api, first.id, first.questions[0].text, asked_at(first))
            if why_no_now is None:
                now = {u.id: asked_at(u) for u in conversing}
        seconds["search"] = {}
        hits: dict[str, dict[Question, list[Hit]]] = {}
        for mode in modes:
            mark = time.perf_counter()
            hits[mode] = {}
            for q in asked:
                # Semantic is the default: ask as today's clients do, without "mode".
                results = api.results(
                    q.user, q.text, None if mode == "semantic" else mode, now.get(q.user)
                )
                hits[mode][q] = [
                    Hit(
                        local_id[r["id"]],
                        float(r["similarity"]),
                        tuple(r["matchedBy"]) if "matchedBy" in r else None,
                    )
                    for r in results
                ]
            seconds["search"][mode] = time.perf_counter() - mark
    baseline: dict[Question, list[Hit]] = {}
    if others:
        mark = time.perf_counter()
        baseline = bm25_baseline(others)
        seconds["search"]["bm25"] = time.perf_counter() - mark
    seconds["total"] = time.perf_counter() - started

    by_mode = {}
    for mode, mode_hits in hits.items():
        english = [q for q in questions if q.category not in SEPARATE]
        by_mode[mode] = {
            "categories": {
                c: figures([q for q in questions if q.category == c], mode_hits) for c in CATEGORIES
            },
            "english": figures(english, mode_hits),
            "languages": by_language(questions, mode_hits),
            # Identifiers and numbers are where a text embedding is weakest.
            "exact_terms": {
                "with_digits": figures(
                    [q for q in questions if q.term and any(ch.isdigit() for ch in q.term)],
                    mode_hits,
                ),
                "words": figures(
                    [q for q in questions if q.term and not any(ch.isdigit() for ch in q.term)],
                    mode_hits,
                ),
            },
            "questions": [
                {
                    "user": q.user,
                    "id": q.id,
                    "category": q.category,
                    "rank": rank_of(q, mode_hits[q]),
                    "results": [[h.memory, round(h.similarity, 4)] for h in mode_hits[q]],
                    **(
                        {"matched_by": [list(h.matched_by or ()) for h in mode_hits[q]]}
                        if mode != "semantic"
                        else {}
                    ),
                }
                for q in questions
            ],
        }
    swept = questions if sweep_on == "all" else [q for q in questions if q.category not in SEPARATE]
    related, unrelated = pair_similarities(swept, hits["semantic"])
    out = {
        "embedder": {"model_id": model_id, "dimensions": dimensions},
        "dataset": {
            "users": len(users),
            "memories": sum(len(u.memories) for u in users),
            "questions": dict(collections.Counter(q.category for q in questions)),
        },
        "limit": LIMIT,
        "modes": by_mode,
        "skipped_modes": {} if why_not is None else {m: why_not for m in MODES[1:]},
        "threshold": {
            "questions": sweep_on,
            "sweep": sweep(related, unrelated),
            **best_threshold(related, unrelated),
        },
        "seconds": seconds,
        "memories_added": sum(len(u.memories) for u in users + others if not u.sessions),
        "sessions_ingested": sum(len(u.sessions) for u in others),
        "messages_ingested": sum(len(s.turns) for u in others for s in u.sessions),
    }
    if not users:  # the facts set was left out
        for key in ("dataset", "modes", "threshold"):
            del out[key]
    if ranked:
        out["sets"] = {
            name: ranked_figures(RANKED[name], set_users, {**hits, BASELINE: baseline})
            for name, set_users in ranked.items()
        }
        for name, set_users in ranked.items():
            if any(u.sessions for u in set_users):
                out["sets"][name]["ingested"] = {
                    "sessions": sum(len(u.sessions) for u in set_users),
                    "messages": sum(len(s.turns) for u in set_users for s in u.sessions),
                    "now": "a day after the user's last session" if now else None,
                    "now_skipped": why_no_now,
                }
    return out


# -- printing -----------------------------------------------------------------

LABELS = {
    "paraphrase": "paraphrase",
    "exact": "exact term",
    "distractor": "distractors",
    "non_english": "non-English",
    "cross_lingual": "cross-lingual",
}


def row(label: str, f: dict[str, t.Any]) -> str:
    if not f["questions"]:
        return f"{label:<16}{0:>5}"
    rel = "".join(f"{f['related_at'][str(th)]:>7.2f}" for th in THRESHOLDS)
    unrel = "".join(f"{f['unrelated_at'][str(th)]:>7.2f}" for th in THRESHOLDS)
    return (
        f"{label:<16}{f['questions']:>5}{f['recall_at_1']:>7.2f}{f['recall_at_5']:>7.2f}"
        f"{f['mrr']:>7.2f}{f['missed_at_10']:>7.2f}   {rel}   {unrel}"
    )


def report(out: dict[str, t.Any]) -> None:
    e = out["embedder"]
    print(f"embedder: {e['model_id']} ({e['dimensions']} dimensions)")
    if "dataset" in out:
        report_facts(out)
    elif out["skipped_modes"]:
        why = next(iter(out["skipped_modes"].values()))
        print(f"modes {', '.join(out['skipped_modes'])}: skipped, {why}")
    for name, figures in out.get("sets", {}).items():
        report_ranked(name, RANKED[name], figures)
    s = out["seconds"]
    searches = ", ".join(f"{mode} {v:.1f} s" for mode, v in s["search"].items())
    stored = []
    if added := out["memories_added"]:
        stored.append(f"{added} adds {s['add']:.1f} s = {s['add'] / added * 1000:.0f} ms each")
    if ingested := out["messages_ingested"]:
        stored.append(
            f"{out['sessions_ingested']} ingests of {ingested} messages {s['ingest']:.1f} s "
            f"= {s['ingest'] / ingested * 1000:.0f} ms a message"
        )
    print()
    print(
        f"run time: {s['total']:.1f} s (setup {s['setup']:.1f} s, {', '.join(stored)}, "
        f"searches: {searches})"
    )


def report_facts(out: dict[str, t.Any]) -> None:
    d = out["dataset"]
    e = out["embedder"]
    counts = ", ".join(f"{n} {LABELS[c]}" for c, n in sorted(d["questions"].items()))
    print(f"data: {d['users']} users, {d['memories']} memories, questions: {counts}")
    print(f"every search: threshold 0, limit {out['limit']}")
    th = "".join(f"{'>=' + format(x, '.1f'):>7}" for x in THRESHOLDS)
    for mode, m in out["modes"].items():
        print()
        print(f"mode: {mode}")
        print(f"{'':<16}{'':>5}{'':>28}   {'related pairs':^21}   {'unrelated pairs':^21}")
        print(f"{'category':<16}{'n':>5}{'R@1':>7}{'R@5':>7}{'MRR':>7}{'miss':>7}   {th}   {th}")
        for c in CATEGORIES:
            if c not in SEPARATE:
                print(row(LABELS[c], m["categories"][c]))
        print(row("all English", m["english"]))
        for c in SEPARATE:
            print(row(LABELS[c], m["categories"][c]))
            for key, f in m["languages"].items():
                if key.startswith(c + ":"):
                    print(row(f"  asked in {key.split(':')[1]}", f))
        digits, words = m["exact_terms"]["with_digits"], m["exact_terms"]["words"]
        if digits["questions"] and words["questions"]:
            print(
                f"exact terms with digits (codes, numbers): {digits['questions']} questions, "
                f"R@1 {digits['recall_at_1']:.2f}; names and words: {words['questions']}, "
                f"R@1 {words['recall_at_1']:.2f}"
            )
        near = m["categories"]["distractor"].get("near_miss_first")
        if near is not None:
            print(f"distractor questions answered first by a listed near miss: {near:.0%}")
    skipped = out["skipped_modes"]
    if skipped:
        why = next(iter(skipped.values()))
        print(f"\nmodes {', '.join(skipped)}: skipped, {why}")

    print()
    print("by chance, if each user's memories came back in random order:")
    print(f"{'category':<16}{'n':>5}{'R@1':>7}{'R@5':>7}{'MRR':>7}")
    semantic = out["modes"]["semantic"]
    for c in CATEGORIES:
        f = semantic["categories"][c]
        if f["questions"]:
            ch = f["chance"]
            print(
                f"{LABELS[c]:<16}{f['questions']:>5}{ch['recall_at_1']:>7.2f}"
                f"{ch['recall_at_5']:>7.2f}{ch['mrr']:>7.2f}"
            )

    t_ = out["threshold"]
    print()
    swept = "all questions" if t_["questions"] == "all" else "English questions"
    print(f"threshold sweep (semantic, {swept}; an answer not in the top 10 is not kept)")
    print(f"{'threshold':<10}{'related kept':>14}{'unrelated passed':>18}{'difference':>12}")
    for r in t_["sweep"]:
        diff = r["related_kept"] - r["unrelated_passed"]
        print(
            f"{r['threshold']:<10.2f}{r['related_kept']:>14.2f}{r['unrelated_passed']:>18.2f}"
            f"{diff:>12.2f}"
        )
    print(
        f"best separation at similarity {t_['similarity']:.3f}: keeps {t_['related_kept']:.0%} "
        f"of related pairs and passes {t_['unrelated_passed']:.0%} of unrelated ones"
    )
    default = next(r for r in t_["sweep"] if math.isclose(r["threshold"], DEFAULT_THRESHOLD))
    print(
        f"memory.search's default threshold, {DEFAULT_THRESHOLD:.2f}, keeps "
        f"{default['related_kept']:.0%} of related pairs"
    )
    print(f"recommended threshold for {e['model_id']}: {t_['recommended']:.2f}")


RANKED_METRICS = {"hit_at_1": "hit@1", "hit_at_5": "hit@5", "hit_at_10": "hit@10", "mrr": "MRR"}


def report_ranked(name: str, spec: RankedSet, r: dict[str, t.Any]) -> None:
    """One table per figure: categories down, each mode and the BM25 baseline across."""
    d = r["dataset"]
    methods = list(r["methods"])
    rows = [*spec.categories.items(), ("all", "all")]
    counts = ", ".join(
        f"{d['questions'].get(c, 0)} {label}" for c, label in spec.categories.items()
    )
    print()
    print(f"== {name}: {d['users']} users, {d['memories']} memories, questions: {counts}")
    print(
        f"every search: threshold 0, limit {LIMIT}; {BASELINE}: plain Okapi BM25 over each "
        f"user's memories, computed here (k1 {bm25.K1}, b {bm25.B}, lower-cased runs of "
        "letters and digits, no stemming)"
    )
    if ingested := r.get("ingested"):
        asked = (
            f"asked with now = {ingested['now']}"
            if ingested["now"]
            else f"asked without now: {ingested['now_skipped']}"
        )
        print(
            f"stored with memory.ingest, a call per session ({ingested['sessions']} calls, "
            f"{ingested['messages']} messages): each turn's text, with its speaker, role, turn id "
            f"and time (its session's start, a minute per turn); the questions {asked}"
        )
        print(f"{BASELINE} reads each turn as [<session date>] <speaker>: <text>")
    ratios = r["hybrid_over_bm25_hit_at_5"]

    def table(title: str, key: str, count: str, ratio: bool = False, caption: str = "") -> None:
        shown = [(c, label) for c, label in rows if group(r["methods"][methods[0]], c).get(count)]
        if not shown:
            return
        print()
        if caption:
            print(caption)
        print(
            f"{title:<16}{'n':>5}{''.join(f'{m:>10}' for m in methods)}"
            + (f"{'hybrid/' + BASELINE:>14}" if ratio else "")
        )
        for c, label in shown:
            figs = [group(r["methods"][m], c) for m in methods]
            line = f"{label:<16}{figs[0][count]:>5}{''.join(f'{f[key]:>10.2f}' for f in figs)}"
            if ratio:
                line += f"{ratios[c]:>14.2f}" if ratios.get(c) is not None else f"{'-':>14}"
            print(line)

    for key, title in RANKED_METRICS.items():
        table(title, key, "questions", ratio=key == "hit_at_5" and bool(ratios))
    table(
        "all in top 10",
        "all_answers_at_10",
        "several_answers",
        caption="questions with several answers: how often all of them are in the top 10",
    )
    table(
        "decoy first",
        "decoy_first",
        "with_decoys",
        caption=f"questions with listed decoys: how often the first result is {spec.decoys}",
    )
    if ratios.get("all") is not None:
        print()
        print(f"{name}: hybrid hit@5 / {BASELINE} hit@5 = {ratios['all']:.2f}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--set",
        action="append",
        choices=SETS,
        dest="sets",
        metavar="NAME",
        help=f"run this set only; may be repeated ({', '.join(SETS)}; default: all of them)",
    )
    parser.add_argument(
        "--limit-users", type=int, default=None, metavar="N", help="N users of each set, evenly"
    )
    parser.add_argument(
        "--json",
        type=pathlib.Path,
        default=None,
        metavar="PATH",
        help="write every figure, and each question's results in each mode, to PATH",
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default=None,
        help="only the conversations of one half: tune (to choose ranking weights on) or "
        "report (to report figures on, the half the weights were not chosen on)",
    )
    parser.add_argument(
        "--data",
        type=pathlib.Path,
        default=None,
        metavar="DIR",
        help="read the set from DIR (the facts set, or the one --set names)",
    )
    parser.add_argument(
        "--sweep",
        choices=("english", "all"),
        default="english",
        help="the facts questions the threshold sweep counts: English ones (for an English-only "
        "model, the default) or all, other languages and cross-lingual ones included",
    )
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="an empty PostgreSQL database (postgresql://...) instead of a temporary SQLite file",
    )
    args = parser.parse_args(argv)
    if args.sets is None:
        args.sets = ["facts"] if args.data is not None else list(SETS)
    if args.data is not None and len(set(args.sets)) != 1:
        parser.error("--data reads one set: name it with --set")
    return args


def partial(args: argparse.Namespace) -> bool:
    """Whether the run leaves out sets or users: such a run is not saved as the record."""
    return (
        set(args.sets) != set(SETS)
        or args.split is not None
        or args.data is not None
        or args.limit_users is not None
    )


def users_of(name: str, args: argparse.Namespace) -> list[User]:
    """The users of one set that ``args`` asks for; ``name`` is one of SETS."""
    if name == "facts":
        users = load(args.data or DATA)
    else:
        users = RANKED[name].load(args.data or RANKED[name].directory, f"{name}.")
    if name == "conversations" and args.split is not None:
        users = [u for u in users if u.split == args.split]
    return users if args.limit_users is None else spread(users, args.limit_users)


def main(argv: list[str] | None = None) -> dict[str, t.Any]:
    args = parse(argv)

    chosen = [name for name in SETS if name in args.sets]
    facts = users_of("facts", args) if "facts" in chosen else []
    ranked = {name: users_of(name, args) for name in chosen if name != "facts"}
    out = run(facts, args.database, ranked, args.sweep)
    report(out)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"figures written to {args.json}")
    if args.split is not None and "conversations" in ranked:
        print(f"(conversations: the {args.split} half only)")
    if partial(args):
        print("(a partial run: not saved to bench/results/eval.txt)")
    return out


if __name__ == "__main__":
    with contextlib.nullcontext() if partial(parse(sys.argv[1:])) else recording("eval"):
        main()
