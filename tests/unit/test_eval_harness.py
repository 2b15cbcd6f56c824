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
import tempfile
import typing as t

import pytest

from bench import bm25
from bench import eval as harness

USERS = ("noor-smallholding", "amara-chef", "aisha-marine", "jonas-hamburg")


def copy_users(tmp_path: pathlib.Path, names: t.Iterable[str]) -> pathlib.Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in names:
        shutil.copy(harness.DATA / f"{name}.jsonl", data)
    return data


COUNTS = ("questions", "related_pairs", "unrelated_pairs", "several_answers", "with_decoys")


def shares(figures: dict) -> t.Iterator[float]:
    """Every share and rate in a figures dict (everything but counts)."""
    for key, value in figures.items():
        if isinstance(value, dict):
            yield from shares(value)
        elif key not in COUNTS:
            yield value


def test_runs_end_to_end_through_the_api(tmp_path, capsys):
    data = copy_users(tmp_path, USERS)
    users = harness.load(data)
    out = harness.main(["--data", str(data), "--json", str(tmp_path / "eval.json")])

    assert json.loads((tmp_path / "eval.json").read_text()) == json.loads(json.dumps(out))
    assert out["embedder"] == {"model_id": "local:all-MiniLM-L6-v2", "dimensions": 384}
    assert out["dataset"]["users"] == len(USERS)
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
    assert "non-English" in printed and "cross-lingual" in printed and "asked in de" in printed
    assert set(semantic["languages"]) == {
        "non_english:de", "cross_lingual:de", "cross_lingual:en", "cross_lingual:es",
        "cross_lingual:fr", "cross_lingual:zh",
    }  # fmt: skip


def test_scores_search_modes_when_the_server_has_them(tmp_path, monkeypatch):
    """A server with modes: 400 for an unknown one, ``matchedBy`` on what it found.

    Stands in for it by passing keyword and hybrid searches on as semantic
    ones, so the harness's path for modes runs before memsvc has them.
    """
    real_search = harness.Api.search

    def search(self, user, query, mode=None, now=None):
        if mode not in (None, *harness.MODES):
            return 400, {"error": {"message": "mode: must be one of ..."}}
        status, body = real_search(self, user, query, now=now)
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


def test_the_threshold_sweep_counts_every_question_when_asked(tmp_path, capsys):
    data = copy_users(tmp_path, ("noor-smallholding", "jonas-hamburg"))
    out = harness.main(["--data", str(data), "--sweep", "all"])
    questions = out["modes"]["semantic"]["questions"]
    hits = {
        q: [harness.Hit(m, s, None) for m, s in asked["results"]]
        for q, asked in zip(
            [q for u in harness.load(data) for q in u.questions], questions, strict=True
        )
    }
    related, unrelated = harness.pair_similarities(list(hits), hits)
    assert out["threshold"]["questions"] == "all"
    assert (
        out["threshold"]["recommended"] == harness.best_threshold(related, unrelated)["recommended"]
    )
    assert "threshold sweep (semantic, all questions;" in capsys.readouterr().out


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


# -- the conversation and near-miss sets, next to BM25 ------------------------


def test_ranked_sets_run_end_to_end_next_to_bm25(tmp_path, capsys):
    """One user of each ranked set, every mode through the API, BM25 beside them."""
    out = harness.main(
        ["--set", "conversations", "--set", "near-miss", "--limit-users", "1"]
        + ["--json", str(tmp_path / "eval.json")]
    )
    assert json.loads((tmp_path / "eval.json").read_text()) == json.loads(json.dumps(out))
    assert "dataset" not in out and "modes" not in out  # the facts set was left out
    assert set(out["sets"]) == {"conversations", "near-miss"}
    for name, figures in out["sets"].items():
        spec = harness.RANKED[name]
        users = harness.spread(spec.load(spec.directory, f"{name}."), 1)
        assert figures["dataset"]["memories"] == len(users[0].memories)
        methods = figures["methods"]
        ran = [m for m in harness.MODES if m not in out["skipped_modes"]]
        assert list(methods) == [*ran, harness.BASELINE]
        asked = {(q["user"], q["id"]) for q in methods[harness.BASELINE]["questions"]}
        assert asked == {(q.user, q.id) for q in users[0].questions}
        for method in methods.values():
            assert set(method["categories"]) == set(spec.categories)
            for group in [method["all"], *method["categories"].values()]:
                assert all(0 <= x <= 1 for x in shares(group)), group
                if group["questions"]:
                    assert group["hit_at_1"] <= group["hit_at_5"] <= group["hit_at_10"]
        # The baseline is bench.bm25 over the user's own memories.
        ids = list(users[0].memories)
        index = bm25.Index([users[0].memories[i] for i in ids])
        for q, answered in zip(
            users[0].questions, methods[harness.BASELINE]["questions"], strict=True
        ):
            expected = [[ids[i], round(score, 4)] for i, score in index.search(q.text, 10)]
            assert answered["results"] == expected
        if "hybrid" in methods:
            ratio = figures["hybrid_over_bm25_hit_at_5"]["all"]
            assert ratio == pytest.approx(
                methods["hybrid"]["all"]["hit_at_5"] / methods["bm25"]["all"]["hit_at_5"]
            )
    printed = capsys.readouterr().out
    assert "== conversations: 1 users" in printed and "== near-miss: 1 users" in printed
    assert "hybrid/bm25" in printed or "skipped" in printed
    assert "(a partial run: not saved to bench/results/eval.txt)" in printed


def test_only_a_full_run_is_recorded():
    assert not harness.partial(harness.parse([]))
    assert not harness.partial(harness.parse(["--json", "x.json"]))
    assert harness.partial(harness.parse(["--set", "conversations"]))
    assert harness.partial(harness.parse(["--limit-users", "3"]))
    assert harness.partial(harness.parse(["--split", "report"]))
    assert harness.parse(["--data", "somewhere"]).sets == ["facts"]
    with pytest.raises(SystemExit):
        harness.parse(["--data", "somewhere", "--set", "facts", "--set", "near-miss"])


def hit(memory: str) -> harness.Hit:
    return harness.Hit(memory, 0.5, None)


def test_hit_at_k_and_mrr_on_a_hand_made_example():
    def q(i: int, answers: str, decoys: str = "") -> harness.Question:
        return harness.Question(
            "u", f"q{i}", "c", "?", frozenset(answers.split()), frozenset(decoys.split()), 20
        )

    # Answers at rank 1, rank 3, rank 7 and nowhere.
    questions = [q(1, "a"), q(2, "b c", "x"), q(3, "d"), q(4, "e", "x")]
    hits = {
        questions[0]: [hit("a"), hit("x")],
        questions[1]: [hit("x"), hit("y"), hit("c"), hit("z"), hit("b")],
        questions[2]: [hit(m) for m in "xyzuvwdpqr"],
        questions[3]: [hit("y"), hit("x")],
    }
    figures = harness.ranked(questions, hits)
    assert figures["questions"] == 4
    assert figures["hit_at_1"] == 1 / 4
    assert figures["hit_at_5"] == 2 / 4
    assert figures["hit_at_10"] == 3 / 4
    assert figures["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 7 + 0) / 4)
    # q2, the only one with several answers, has both in its results.
    assert figures["several_answers"] == 1 and figures["all_answers_at_10"] == 1
    # Of q2 and q4, which list a decoy, only q2's first result is it.
    assert figures["with_decoys"] == 2 and figures["decoy_first"] == 1 / 2
    assert harness.ranked([], {}) == {"questions": 0}


def test_bm25_ranks_as_hand_computed_scores_say():
    docs = ["the cat sat", "the dog sat on the mat", "a cat and a cat", "nothing here"]
    index = bm25.Index(docs)
    assert bm25.words("INV-20418, Café!") == ["inv", "20418", "café"]
    # 4 documents of 3, 6, 5 and 2 words: average length 4.
    n, average = 4, 4.0

    def idf(df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def term(tf: int, length: int, df: int) -> float:
        return idf(df) * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))

    cat = {0: term(1, 3, 2), 2: term(2, 5, 2)}
    sat = {0: term(1, 3, 2), 1: term(1, 6, 2)}
    expected = {0: cat[0] + sat[0], 1: sat[1], 2: cat[2]}
    found = index.search("cat sat cat", 10)  # a repeated query word counts once
    assert [i for i, _ in found] == sorted(expected, key=lambda i: -expected[i])
    for i, score in found:
        assert score == pytest.approx(expected[i])
    assert [i for i, _ in index.search("cat sat", 1)] == [0]
    assert index.search("unicorn", 10) == []
    # Equal scores: the memory stored last first, as memsvc breaks ties.
    assert [i for i, _ in bm25.Index(["red fox", "red fox"]).search("fox", 10)] == [1, 0]


def test_a_conversation_turn_is_read_with_its_date_and_speaker(tmp_path):
    """Each turn is kept as said; BM25 reads it as one text that says who said it and when.

    The session starts half an hour after midnight at +01:00: the date in the
    text is the one where it was said, not the UTC one (the day before).
    """
    records = [
        {"kind": "conversation", "user": "Ana", "roles": {"Ana": "user", "Assistant": "assistant"},
         "split": "report"},
        {"kind": "session", "id": "s1", "date": "2025-03-31T00:30:00+01:00",
         "speakers": ["Ana", "Assistant"]},
        {"kind": "turn", "id": "s1t1", "session": "s1", "speaker": "Ana",
         "text": "I moved on Friday."},
        {"kind": "turn", "id": "s1t2", "session": "s1", "speaker": "Assistant", "text": "Noted."},
        {"kind": "session", "id": "s2", "date": "2025-04-02T18:00:00+01:00",
         "speakers": ["Ana", "Assistant"]},
        {"kind": "turn", "id": "s2t1", "session": "s2", "speaker": "Ana", "text": "Noted."},
        {"kind": "question", "id": "q1", "category": "temporal", "question": "When did Ana move?",
         "evidence": ["s1t1"], "answer": "Friday 28 March 2025"},
    ]  # fmt: skip
    (tmp_path / "ana.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    [user] = harness.load_conversations(tmp_path, "conversations.")

    assert (user.id, user.speaker, user.split) == ("conversations.ana", "Ana", "report")
    assert user.memories == {
        "s1t1": "[2025-03-31] Ana: I moved on Friday.",
        "s1t2": "[2025-03-31] Assistant: Noted.",
        "s2t1": "[2025-04-02] Ana: Noted.",
    }
    assert user.sessions == [
        harness.Session(
            "s1",
            "2025-03-31T00:30:00+01:00",
            (
                harness.Turn("s1t1", "Ana", "user", "I moved on Friday."),
                harness.Turn("s1t2", "Assistant", "assistant", "Noted."),
            ),
        ),
        harness.Session(
            "s2", "2025-04-02T18:00:00+01:00", (harness.Turn("s2t1", "Ana", "user", "Noted."),)
        ),
    ]
    [question] = user.questions
    assert question.answers == {"s1t1"} and question.candidates == 3
    # memory.ingest is given the words alone, the speaker and time beside them,
    # a minute per turn from the session's start, in its offset.
    assert harness.messages(user.sessions[0]) == [
        {"id": "s1t1", "role": "user", "name": "Ana", "content": "I moved on Friday.",
         "at": "2025-03-31T00:30:00+01:00"},
        {"id": "s1t2", "role": "assistant", "name": "Assistant", "content": "Noted.",
         "at": "2025-03-31T00:31:00+01:00"},
    ]  # fmt: skip
    assert harness.asked_at(user) == "2025-04-03T18:00:00+01:00"


SMALL_TALK = [
    "Morning! How was the weekend?",
    "Quiet, mostly. I read on the balcony.",
    "The weather has been lovely for it.",
    "It has. I might even start running again.",
]
CONVERSATION = [
    {"kind": "conversation", "user": "Ana", "roles": {"Ana": "user", "Assistant": "assistant"},
     "split": "tune"},
    {"kind": "session", "id": "s1", "date": "2025-03-30T23:50:00+01:00",
     "speakers": ["Ana", "Assistant"]},
    *({"kind": "turn", "id": f"s1t{i}", "session": "s1", "speaker": ("Ana", "Assistant")[i % 2],
       "text": text} for i, text in enumerate(SMALL_TALK, 1)),
    {"kind": "turn", "id": "s1t5", "session": "s1", "speaker": "Ana",
     "text": "My cat is called Biscuit, she is a ginger tabby."},
    {"kind": "turn", "id": "s1t6", "session": "s1", "speaker": "Assistant",
     "text": "Biscuit is a lovely name for a ginger cat."},
    {"kind": "session", "id": "s2", "date": "2025-04-14T18:00:00+02:00",
     "speakers": ["Ana", "Assistant"]},
    {"kind": "turn", "id": "s2t1", "session": "s2", "speaker": "Ana",
     "text": "The dentist moved my appointment to Thursday at nine."},
    {"kind": "turn", "id": "s2t2", "session": "s2", "speaker": "Assistant",
     "text": "Noted: the dentist on Thursday at nine."},
    {"kind": "turn", "id": "s2t3", "session": "s2", "speaker": "Ana",
     "text": "I also bought a green bicycle with a basket."},
    {"kind": "question", "id": "q1", "category": "single_fact",
     "question": "What is the name of Ana's cat?", "evidence": ["s1t5", "s1t6"],
     "answer": "Biscuit"},
    {"kind": "question", "id": "q2", "category": "updated",
     "question": "When does Ana see the dentist?", "evidence": ["s2t1", "s2t2"],
     "answer": "Thursday at nine"},
    {"kind": "question", "id": "q3", "category": "single_fact",
     "question": "What colour is Ana's bike?", "evidence": ["s2t3"], "answer": "green"},
]  # fmt: skip


def conversation_set(tmp_path: pathlib.Path) -> pathlib.Path:
    data = tmp_path / "conversations"
    data.mkdir()
    (data / "ana.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CONVERSATION))
    return data


def test_conversations_are_ingested_a_session_a_call_and_ranked_by_turn_id(tmp_path, capsys):
    """Each session is one memory.ingest call; the server's results map back to the set's turns.

    The database is a file kept after the run, so what memsvc stored can be
    read back through the API: the turn's words alone, with its speaker,
    role, session, turn id and time.
    """
    data = conversation_set(tmp_path)
    [user] = harness.load_conversations(data, "conversations.")
    database = str(tmp_path / "kept.sqlite3")
    out = harness.run([], database, {"conversations": [user]})

    assert out["memories_added"] == 0
    assert (out["sessions_ingested"], out["messages_ingested"]) == (2, 9)
    figures = out["sets"]["conversations"]
    assert figures["ingested"]["sessions"] == 2 and figures["ingested"]["messages"] == 9
    turns = {turn.id for s in user.sessions for turn in s.turns}
    for method, results in figures["methods"].items():
        for asked in results["questions"]:
            assert {memory for memory, _ in asked["results"]} <= turns, (method, asked)
    semantic = {q["id"]: q for q in figures["methods"]["semantic"]["questions"]}
    # The cat's name and the bike's colour come first: a result id mapped
    # wrong could not name the labelled turn.
    assert semantic["q1"]["rank"] == 1 and semantic["q1"]["results"][0][0] in {"s1t5", "s1t6"}
    assert semantic["q3"]["rank"] == 1 and semantic["q3"]["results"][0][0] == "s2t3"
    assert len(semantic["q1"]["results"]) == 9  # threshold 0: every turn of the user

    harness.report(out)
    printed = capsys.readouterr().out
    assert "stored with memory.ingest, a call per session (2 calls, 9 messages)" in printed
    assert "2 ingests of 9 messages" in printed

    with tempfile.TemporaryDirectory() as tmp, harness.memsvc_app(tmp, database) as app:
        api = harness.Api(app, harness.create_api_key(app))
        resp = api.client.get(
            "/trpc/memory.getAll",
            query_string={"input": json.dumps({"userId": user.id, "limit": 100})},
            headers=api.headers,
        )
        stored = {m["messageId"]: m for m in resp.get_json()["result"]["data"]}
    assert set(stored) == turns
    cat = stored["s1t5"]
    assert cat["content"] == "My cat is called Biscuit, she is a ginger tabby."
    assert (cat["kind"], cat["sessionId"], cat["role"], cat["speaker"], cat["position"]) == (
        "message", "s1", "user", "Ana", 4,
    )  # fmt: skip
    # 23:50 at +01:00, and four turns before it: 23:54, 22:54 UTC.
    assert cat["occurredAt"] == "2025-03-30T22:54:00.000Z"
    assert stored["s1t6"]["role"] == "assistant" and stored["s1t6"]["speaker"] == "Assistant"
    assert stored["s2t3"]["occurredAt"] == "2025-04-14T16:02:00.000Z"


@pytest.mark.parametrize("server", ["takes now", "refuses now"])
def test_conversation_questions_are_asked_a_day_after_the_last_session(
    tmp_path, monkeypatch, server
):
    """A server that reads ``now`` refuses one that is no time; one that refuses the field, any.

    Stands in for such servers in front of the real one (which drops an
    input field it does not know), so the harness's path for ``now`` runs
    before memsvc has it: every conversation question is asked with the
    same ``now``, a day after the user's last session began, or, on a
    server refusing it, without one.
    """
    real_search = harness.Api.search
    asked_with: list[str | None] = []

    def search(self, user, query, mode=None, now=None):
        if now is not None and (server == "refuses now" or not now[:4].isdigit()):
            return 400, {"error": {"message": "Invalid input: now: must be a timestamp"}}
        asked_with.append(now)
        return real_search(self, user, query, mode)

    monkeypatch.setattr(harness.Api, "search", search)
    out = harness.main(["--set", "conversations", "--data", str(conversation_set(tmp_path))])
    ingested = out["sets"]["conversations"]["ingested"]
    if server == "takes now":
        assert ingested["now"] is not None and ingested["now_skipped"] is None
        # The probe, then each of the 3 questions in each mode that ran; the
        # modes probe is the only search without it.
        modes = [m for m in out["sets"]["conversations"]["methods"] if m != harness.BASELINE]
        assert set(asked_with) - {None} == {"2025-04-15T18:00:00+02:00"}
        assert asked_with.count("2025-04-15T18:00:00+02:00") == 1 + 3 * len(modes)
    else:
        assert ingested["now"] is None
        assert ingested["now_skipped"].startswith('the server refuses "now"')
        assert set(asked_with) == {None}


def test_the_probe_finds_whether_memsvc_reads_now(tmp_path):
    """memsvc drops an input field it does not know: ``now`` is used only if search reads it."""
    from memsvc.api.inputs import SearchInput

    out = harness.main(["--set", "conversations", "--data", str(conversation_set(tmp_path))])
    ingested = out["sets"]["conversations"]["ingested"]
    if "now" in SearchInput().fields:
        assert ingested["now"] is not None and ingested["now_skipped"] is None
    else:
        assert ingested["now"] is None
        assert ingested["now_skipped"].startswith('the server ignores "now"')


def test_split_takes_one_half_of_the_conversations():
    """--split runs the half its name says, and the two halves are the whole set."""
    whole = harness.users_of("conversations", harness.parse(["--set", "conversations"]))
    halves = {
        split: harness.users_of("conversations", harness.parse(["--split", split]))
        for split in harness.SPLITS
    }
    assert all(u.split == split for split, users in halves.items() for u in users)
    assert len(halves["tune"]) == len(halves["report"]) == len(whole) // 2
    assert sorted(u.id for users in halves.values() for u in users) == sorted(u.id for u in whole)
    # The other sets have no halves: --split leaves them whole.
    near_miss = harness.parse(["--set", "near-miss", "--split", "tune"])
    assert len(harness.users_of("near-miss", near_miss)) == len(
        harness.RANKED["near-miss"].load(harness.RANKED["near-miss"].directory, "")
    )
