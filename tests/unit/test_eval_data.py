"""The retrieval evaluation set (tests/data/eval) follows the rules of its README.

A mislabelled question silently skews every figure ``bench.eval`` prints, so
the rules that can be checked mechanically are checked here.
"""

from __future__ import annotations

import collections
import json
import pathlib
import re

import pytest

EVAL_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "eval"
FILES = sorted(EVAL_DIR.glob("*.jsonl"))

CATEGORIES = ("paraphrase", "exact", "distractor", "non_english")
MEMORY_FIELDS = {"kind", "id", "content"}
QUESTION_FIELDS = {"kind", "id", "category", "question", "answers"}
# The field each category must carry on top of QUESTION_FIELDS, and no other.
EXTRA_FIELD = {
    "paraphrase": None,
    "exact": "term",
    "distractor": "near_misses",
    "non_english": "language",
}

# Words that say nothing about the topic: a paraphrase may share these freely.
STOPWORDS = set(
    """a an the is are was were be been to of in on at for with and or but not no
    his her he she they them their its it this that what which who whom whose when
    where why how can could should would will do does did has have had i me my we
    our you your user any from by as up about after before than then so if into over
    under every each there here out off very more most""".split()
)
MAX_SHARED_WORDS = 2


def content_words(text: str) -> set[str]:
    """Lower-cased words that carry meaning, with a plural ``s`` dropped."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {w.rstrip("s") for w in words if w not in STOPWORDS and len(w) > 2}


def read(path: pathlib.Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "", f"{path.name}: must end with a newline"
    records = []
    for number, line in enumerate(lines[:-1], 1):
        assert line.strip(), f"{path.name}:{number}: blank line"
        try:
            record = json.loads(line)
        except ValueError as e:
            pytest.fail(f"{path.name}:{number}: not JSON: {e}")
        assert isinstance(record, dict), f"{path.name}:{number}: not an object"
        records.append(record)
    return records


def test_the_set_is_large_and_balanced():
    users = memories = 0
    categories: collections.Counter[str] = collections.Counter()
    for path in FILES:
        records = read(path)
        users += 1
        memories += sum(r.get("kind") == "memory" for r in records)
        categories.update(r.get("category") for r in records if r.get("kind") == "question")
    assert users >= 40
    assert memories >= 600
    assert sum(categories.values()) >= 300
    assert categories["paraphrase"] >= 80
    assert categories["exact"] >= 80
    assert categories["distractor"] >= 60
    assert 8 <= categories["non_english"] <= 20


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_file_is_well_formed(path: pathlib.Path):
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", path.stem), "user ids: lower-case words and dashes"
    records = read(path)
    memories: dict[str, str] = {}
    question_ids: set[str] = set()
    for r in records:
        where = f"{path.name} {r.get('id')}"
        if r.get("kind") == "memory":
            assert set(r) == MEMORY_FIELDS, where
            assert re.fullmatch(r"m[1-9][0-9]*", r["id"]), where
            assert r["id"] not in memories, f"{where}: duplicate id"
            assert isinstance(r["content"], str) and r["content"].strip(), where
            memories[r["id"]] = r["content"]
        else:
            assert r.get("kind") == "question", f"{where}: kind must be memory or question"
            assert re.fullmatch(r"q[1-9][0-9]*", r["id"]), where
            assert r["id"] not in question_ids, f"{where}: duplicate id"
            question_ids.add(r["id"])
    assert memories and question_ids, f"{path.name}: needs memories and questions"

    texts = collections.Counter(" ".join(t.lower().split()) for t in memories.values())
    assert not [t for t, n in texts.items() if n > 1], f"{path.name}: duplicate memory texts"

    for r in records:
        if r["kind"] != "question":
            continue
        where = f"{path.name} {r['id']}"
        category = r.get("category")
        assert category in CATEGORIES, f"{where}: category {category!r}"
        extra = EXTRA_FIELD[category]
        assert set(r) == QUESTION_FIELDS | ({extra} if extra else set()), where
        assert isinstance(r["question"], str) and r["question"].strip(), where
        answers = r["answers"]
        assert isinstance(answers, list) and answers, f"{where}: needs answers"
        assert len(set(answers)) == len(answers), f"{where}: repeated answer"
        missing = [a for a in answers if a not in memories]
        assert not missing, f"{where}: answers {missing} are not memories of this user"

        if category == "exact":
            term = r["term"].lower()
            assert term in r["question"].lower(), f"{where}: term not in the question"
            assert any(term in memories[a].lower() for a in answers), (
                f"{where}: term not in any answer"
            )
        elif category == "distractor":
            near = r["near_misses"]
            assert isinstance(near, list) and near, f"{where}: needs near_misses"
            assert all(n in memories for n in near), f"{where}: unknown near miss"
            assert not set(near) & set(answers), f"{where}: a near miss is also an answer"
            assert 30 <= len(memories) <= 80, f"{where}: distractor users hold 30-80 memories"
        elif category == "non_english":
            assert re.fullmatch(r"[a-z]{2}", r["language"]) and r["language"] != "en", where
        else:
            shared = content_words(r["question"]) & set().union(
                *(content_words(memories[a]) for a in answers)
            )
            assert len(shared) <= MAX_SHARED_WORDS, (
                f"{where}: a paraphrase shares {sorted(shared)} with its answer"
            )
