"""``memsvc eval FILE``: a team's own questions against its live database, read-only.

The figures are checked against what ``memory.search`` answers over HTTP
for the same questions, modes and thresholds: the command must measure the
search the application gets, on the configured store and model.
"""

from __future__ import annotations

import json

import pytest

from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

MEMORIES = {
    "u1": [
        "Ana works as a nurse at the city hospital",
        "My sister Ana moved to Lisbon in 2021",
        "I am allergic to peanuts",
        "Our wifi password is on the fridge",
        "The dentist appointment is on Thursday at 3pm",
        "I prefer green tea to coffee in the morning",
        "Invoice INV-20418 was paid on 24 June",
        "The car needs new tyres before winter",
    ],
    "u2": ["Bo plays the cello in an orchestra", "Bo is allergic to cats"],
}


@pytest.fixture
def memories(client, auth, new_key):
    """The users' memories in tenant-A (content -> id), and one look-alike in tenant-B."""
    ids = {}
    for user, texts in MEMORIES.items():
        for text in texts:
            ids[text] = data(
                mutate(client, "memory.add", {"userId": user, "content": text}, headers=auth)
            )["id"]
    other = {"x-api-key": new_key("tenant-B")}
    look_alike = {"userId": "u1", "content": "I am allergic to peanuts"}
    data(mutate(client, "memory.add", look_alike, headers=other))
    return ids


def write_questions(tmp_path, rows: list[object], name: str = "questions.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def search(client, auth, user: str, text: str, mode: str, threshold: float) -> list[dict]:
    body = {"userId": user, "query": text, "mode": mode, "threshold": threshold, "limit": 10}
    return data(query(client, "memory.search", body, headers=auth))


def test_eval_measures_what_memory_search_answers_and_writes_nothing(
    memsvc_cli, client, auth, memories, tmp_path
):
    questions = [
        {"userId": "u1", "query": "what is Ana's job?", "expected": [memories[MEMORIES["u1"][0]]]},
        {"userId": "u1", "query": "food allergies", "expected": ["I am allergic to peanuts"]},
        {
            "userId": "u1",
            "query": "INV-20418",
            "expected": ["Invoice INV-20418 was paid on 24 June"],
        },  # fmt: skip
        {
            "userId": "u1",
            "query": "where does my sister live?",
            "expected": [MEMORIES["u1"][1], memories[MEMORIES["u1"][0]]],
        },  # fmt: skip
        # Another user's memory is never an answer for u1.
        {"userId": "u1", "query": "who plays the cello?", "expected": [MEMORIES["u2"][0]]},
        {"userId": "u2", "query": "pets Bo cannot have", "expected": ["Bo is allergic to cats"]},
    ]
    path = write_questions(tmp_path, questions)
    before = memsvc_cli("export", "-", "--tenant", "tenant-A")
    assert before.exit_code == 0, before.output

    result = memsvc_cli("eval", path, "--tenant", "tenant-A", "--json", str(tmp_path / "r.json"))
    after = memsvc_cli("export", "-", "--tenant", "tenant-A")

    assert result.exit_code == 0, result.output
    # Read-only: the tenant's memories, their history and its keys are exactly as before.
    assert _lines_of(after.stdout) == _lines_of(before.stdout)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["questions"] == 6 and report["tenant"] == "tenant-A" and report["limit"] == 10
    # Line 5 expects a memory of u2: named as one no search of u1 can return.
    assert report["missing"] == [{"line": 5, "expected": MEMORIES["u2"][0]}]
    assert "warning: line 5:" in result.stderr and "no search can return it" in result.stderr
    ranks = {(r["line"], r["mode"]): r["rank"] for r in report["ranks"]}
    for mode in ("semantic", "keyword", "hybrid"):
        sweep = {row["threshold"]: row for row in report["modes"][mode]["thresholds"]}
        assert list(sweep) == sorted(sweep) and {0.0, 0.35, 0.7} <= set(sweep)
        for threshold in (0.0, 0.35, 0.7):
            firsts, kept, wrong = [], 0, 0
            for line, q in enumerate(questions, start=1):
                found = search(client, auth, q["userId"], q["query"], mode, threshold)
                flags = [m["id"] in q["expected"] or m["content"] in q["expected"] for m in found]
                first = flags.index(True) + 1 if True in flags else None
                firsts.append(first)
                kept += len(found)
                wrong += flags.count(False)
                if threshold == 0.0:
                    assert ranks[(line, mode)] == first, (line, mode)
            row = sweep[threshold]
            for k in (1, 5, 10):
                share = sum(1 for f in firsts if f is not None and f <= k) / len(questions)
                assert row[f"hit@{k}"] == pytest.approx(share, abs=1e-4), (mode, threshold, k)
            mrr = sum(1 / f for f in firsts if f is not None) / len(questions)
            assert row["mrr"] == pytest.approx(mrr, abs=1e-4)
            assert row["kept"] == pytest.approx(kept / len(questions), abs=1e-3)
            assert row["notExpected"] == pytest.approx(wrong / len(questions), abs=1e-3)
        assert report["modes"][mode]["ranking"] == {
            k: v for k, v in sweep[0.0].items() if k != "threshold"
        }
    # The questions are easy for the bundled model: the figures are not all zero.
    assert report["modes"]["semantic"]["ranking"]["hit@1"] >= 4 / 6
    assert report["modes"]["keyword"]["ranking"]["hit@1"] >= 3 / 6
    # Printed: the ranking, each mode's sweep with the default and recommended thresholds.
    out = result.stdout
    assert "6 questions of tenant tenant-A" in out and "Ranking (threshold 0)" in out
    assert "hybrid: a call with each threshold (limit 10)" in out
    assert "<- default (MEMSVC_SEARCH_DEFAULT_THRESHOLD)" in out
    assert "<- recommended for this model" in out and "Highest hit@5:" in out


def _lines_of(export: str) -> list[str]:
    """An export's lines but its header (which says when it was made)."""
    lines = export.splitlines()
    assert len(lines) > len(MEMORIES["u1"]) + len(MEMORIES["u2"])
    return sorted(line for line in lines if '"exportedAt"' not in line)


@pytest.mark.stores("sqlite")
def test_the_limit_and_json_on_stdout(memsvc_cli, memories, tmp_path):
    path = write_questions(
        tmp_path, [{"userId": "u1", "query": "tea or coffee", "expected": [MEMORIES["u1"][5]]}]
    )
    result = memsvc_cli("eval", path, "--tenant", "tenant-A", "--limit", "3", "--json", "-")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("\n{") :])
    assert report["limit"] == 3
    ranking = report["modes"]["semantic"]["ranking"]
    assert set(ranking) == {"hit@1", "mrr", "kept", "notExpected"}  # hit@5 needs limit 5
    assert ranking["hit@1"] == 1.0 and ranking["kept"] == 3.0 and ranking["notExpected"] == 2.0


@pytest.mark.stores("sqlite")
def test_another_tenant_sees_none_of_these_memories(memsvc_cli, memories, tmp_path):
    path = write_questions(
        tmp_path, [{"userId": "u1", "query": "allergies", "expected": ["I am allergic to peanuts"]}]
    )
    result = memsvc_cli("eval", path, "--tenant", "tenant-C", "--json", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["missing"] == [{"line": 1, "expected": "I am allergic to peanuts"}]
    for mode in report["modes"].values():
        assert mode["ranking"] == {
            "hit@1": 0, "hit@5": 0, "hit@10": 0, "mrr": 0, "kept": 0, "notExpected": 0,
        }  # fmt: skip


GOOD = '{"userId": "u1", "query": "q", "expected": ["x"]}'


@pytest.mark.stores("sqlite")
@pytest.mark.parametrize(
    "lines, message",
    [
        ([GOOD, "{not json"], "line 2: not JSON"),
        ([GOOD, "", '["u1", "q", ["x"]]'], "line 3: not a JSON object"),
        (['{"userId": "u1", "expected": ["x"]}'], "line 1: query is missing"),
        (['{"user_id": "u1", "query": "q", "expected": ["x"]}'], "line 1: userId is missing"),
        (
            ['{"userId": "u1", "query": "q", "expected": ["x"], "expectedIds": []}'],
            "line 1: unknown field 'expectedIds'",
        ),
        (
            ['{"userId": "u1", "query": "q", "expected": []}'],
            "line 1: expected must be a non-empty array",
        ),  # fmt: skip
        (
            ['{"userId": "u1", "query": "q", "expected": "x"}'],
            "line 1: expected must be a non-empty array",
        ),  # fmt: skip
        (['{"userId": "u1", "query": "q", "expected": ["x", 7]}'], "line 1: expected[1] must be"),
        (['{"userId": 17, "query": "q", "expected": ["x"]}'], "line 1: userId must be a string"),
        (
            ['{"userId": "u1", "query": "   ", "expected": ["x"]}'],
            "line 1: query: must not be empty",
        ),  # fmt: skip
        (["", "  "], "no questions"),
    ],
)
def test_a_malformed_line_is_named_and_nothing_is_searched(memsvc_cli, tmp_path, lines, message):
    result = memsvc_cli("eval", write_questions(tmp_path, lines), "--tenant", "tenant-A")
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.output
    assert result.stdout == ""
    if "no questions" in message or "missing" in message or "unknown" in message:
        assert '{"userId": string, "query": string, "expected": [' in result.stderr


@pytest.mark.stores("sqlite")
def test_no_database_is_created(memsvc_cli, db_path, tmp_path):
    import os

    path = write_questions(tmp_path, [GOOD])
    result = memsvc_cli("eval", path, "--tenant", "tenant-A")
    assert result.exit_code == 1 and "no database at" in result.stderr
    assert not os.path.exists(db_path)


@pytest.mark.stores("sqlite")
def test_a_database_of_another_model_is_refused(memsvc_cli, cli_context, memories, tmp_path):
    from tests.support.helpers import HashEmbedder

    cli_context.embedder = HashEmbedder(16)
    result = memsvc_cli("eval", write_questions(tmp_path, [GOOD]), "--tenant", "tenant-A")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "local:all-MiniLM-L6-v2" in result.stderr, result.stderr


@pytest.mark.stores("sqlite")
def test_the_help_shows_the_shape_of_a_line(memsvc_cli):
    result = memsvc_cli("eval", "--help")
    assert result.exit_code == 0
    assert '{"userId": "u-17", "query": "where does Ana work now?",' in result.stdout
    text = " ".join(result.stdout.split())
    assert "hit@1/5/10 and MRR per mode and threshold" in text
    assert "Nothing is written to the database" in text
