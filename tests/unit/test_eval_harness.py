"""bench.eval, the retrieval evaluation, end to end on a few users with the bundled model.

The full run takes about a minute; these take a few seconds and prove the
path through memsvc's API, the figures and the JSON output, so that a
broken harness is not first noticed when someone runs ``make eval``.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import typing as t

import pytest

from bench import eval as harness

USERS = ("noor-smallholding", "amara-chef", "aisha-marine")


def copy_users(tmp_path: pathlib.Path, names: t.Iterable[str]) -> pathlib.Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in names:
        shutil.copy(harness.DATA / f"{name}.jsonl", data)
    return data


def shares(figures: dict) -> t.Iterator[float]:
    """Every share and rate in a figures dict (everything but counts)."""
    for key, value in figures.items():
        if isinstance(value, dict):
            yield from shares(value)
        elif key not in ("questions", "related_pairs", "unrelated_pairs"):
            yield value


def test_runs_end_to_end_through_the_api(tmp_path, capsys):
    data = copy_users(tmp_path, USERS)
    users = harness.load(data)
    out = harness.main(["--data", str(data), "--json", str(tmp_path / "eval.json")])

    assert json.loads((tmp_path / "eval.json").read_text()) == json.loads(json.dumps(out))
    assert out["embedder"] == {"model_id": "local:all-MiniLM-L6-v2", "dimensions": 384}
    assert out["dataset"]["users"] == 3
    assert out["dataset"]["memories"] == sum(len(u.memories) for u in users)
    assert set(out["dataset"]["questions"]) == set(harness.CATEGORIES)
    # Semantic always; keyword and hybrid either run or are reported as skipped.
    assert "semantic" in out["modes"]
    assert set(out["modes"]).isdisjoint(out["skipped_modes"])
    assert set(out["modes"]) | set(out["skipped_modes"]) == set(harness.MODES)

    semantic = out["modes"]["semantic"]
    asked = {(q["user"], q["id"]) for q in semantic["questions"]}
    assert asked == {(q.user, q.id) for u in users for q in u.questions}
    for question in semantic["questions"]:
        assert 1 <= len(question["results"]) <= harness.LIMIT
        similarities = [s for _, s in question["results"]]
        assert similarities == sorted(similarities, reverse=True)
    for figures in [semantic["english"], *semantic["categories"].values()]:
        assert all(0 <= x <= 1 for x in shares(figures)), figures
    # Ids mapped wrong, or questions sent to the wrong user, would score
    # about as well as chance; the bundled model does far better.
    english = semantic["english"]
    assert english["recall_at_5"] >= 0.8
    assert english["mrr"] > 2 * english["chance"]["mrr"]

    recommended = out["threshold"]["recommended"]
    assert 0 <= recommended <= 1 and math.isclose(recommended * 20, round(recommended * 20))
    printed = capsys.readouterr().out
    assert f"recommended threshold for local:all-MiniLM-L6-v2: {recommended:.2f}" in printed
    assert "non-English" in printed


def test_scores_search_modes_when_the_server_has_them(tmp_path, monkeypatch):
    """A server with modes: 400 for an unknown one, ``matchedBy`` on what it found.

    Stands in for it by passing keyword and hybrid searches on as semantic
    ones, so the harness's path for modes runs before memsvc has them.
    """
    real_search = harness.Api.search

    def search(self, user, query, mode=None):
        if mode not in (None, *harness.MODES):
            return 400, {"error": {"message": "mode: must be one of ..."}}
        status, body = real_search(self, user, query)
        if mode in ("keyword", "hybrid"):
            for r in body["result"]["data"]:
                r["matchedBy"] = ["semantic"]
        return status, body

    monkeypatch.setattr(harness.Api, "search", search)
    out = harness.main(["--data", str(copy_users(tmp_path, USERS[1:]))])
    assert list(out["modes"]) == list(harness.MODES)
    assert out["skipped_modes"] == {}
    semantic, keyword = out["modes"]["semantic"], out["modes"]["keyword"]
    assert keyword["english"] == semantic["english"]
    assert all(q["matched_by"] for q in keyword["questions"])


def test_limit_users_takes_large_and_small_users():
    users = harness.load(harness.DATA)
    chosen = harness.spread(users, 3)
    assert len(chosen) == 3 and len({u.id for u in chosen}) == 3
    assert max(len(u.memories) for u in chosen) >= 30
    assert harness.spread(users, 1000) == users


def question(answers: int, candidates: int) -> harness.Question:
    return harness.Question(
        "u", "q1", "exact", "?", frozenset(f"m{i}" for i in range(answers)), frozenset(), candidates
    )


def test_chance_baseline():
    assert harness.chance_recall(question(1, 6), 5) == pytest.approx(5 / 6)
    assert harness.chance_recall(question(1, 40), 1) == pytest.approx(1 / 40)
    assert harness.chance_recall(question(2, 4), 1) == pytest.approx(1 / 2)
    assert harness.chance_recall(question(1, 3), 5) == 1.0
    assert harness.chance_mrr(question(1, 1)) == 1.0
    assert harness.chance_mrr(question(1, 2)) == pytest.approx((1 + 1 / 2) / 2)
    # Beyond the 10 results a rank counts nothing.
    top_ten = sum(1 / i for i in range(1, 11))
    assert harness.chance_mrr(question(1, 20)) == pytest.approx(top_ten / 20)


def test_best_threshold_separates_related_from_unrelated():
    best = harness.best_threshold([0.9, 0.8, 0.6], [0.5, 0.2, 0.1])
    # Any threshold in (0.5, 0.6] keeps all related and passes no unrelated.
    assert best["related_kept"] == 1 and best["unrelated_passed"] == 0
    assert best["similarity"] == pytest.approx(0.6)
    assert best["recommended"] == 0.55


def test_best_threshold_never_keeps_an_answer_that_was_not_returned():
    best = harness.best_threshold([0.9, -math.inf], [0.4])
    assert best["related_kept"] == 0.5 and best["unrelated_passed"] == 0
    assert best["recommended"] == 0.65
