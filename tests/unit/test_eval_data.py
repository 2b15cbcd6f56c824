"""The retrieval evaluation set (tests/data/eval) follows the rules of its README.

A mislabelled question silently skews every figure ``bench.eval`` prints, so
the rules that can be checked mechanically are checked here.
"""

from __future__ import annotations

import collections
import datetime
import json
import pathlib
import re

import pytest

EVAL_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "eval"
FILES = sorted(EVAL_DIR.glob("*.jsonl"))

CATEGORIES = ("paraphrase", "exact", "distractor", "non_english", "cross_lingual")
MEMORY_FIELDS = {"kind", "id", "content"}  # and "language" for a memory not in English
QUESTION_FIELDS = {"kind", "id", "category", "question", "answers"}
# The field each category must carry on top of QUESTION_FIELDS, and no other.
EXTRA_FIELD = {
    "paraphrase": None,
    "exact": "term",
    "distractor": "near_misses",
    "non_english": "language",
    "cross_lingual": "language",
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
# Scripts a text's language must (or must not) be written in.
HAN = re.compile(r"[\u4e00-\u9fff]")
KANA = re.compile(r"[\u3040-\u30ff]")
HANGUL = re.compile(r"[\uac00-\ud7af]")


def written_in(text: str, language: str) -> bool:
    """Whether ``text`` is in the script of ``language``, as far as scripts tell."""
    if language == "zh":
        return bool(HAN.search(text)) and not KANA.search(text)
    if language == "ja":
        return bool(KANA.search(text))
    if language == "ko":
        return bool(HANGUL.search(text))
    return not (HAN.search(text) or KANA.search(text) or HANGUL.search(text))


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
    memory_languages: collections.Counter[str] = collections.Counter()
    asked_in: dict[str, set[str]] = collections.defaultdict(set)
    for path in FILES:
        records = read(path)
        users += 1
        memories += sum(r.get("kind") == "memory" for r in records)
        memory_languages.update(r.get("language", "en") for r in records if r["kind"] == "memory")
        categories.update(r.get("category") for r in records if r.get("kind") == "question")
        for r in records:
            if r.get("category") in ("non_english", "cross_lingual"):
                asked_in[r["category"]].add(r["language"])
    assert users >= 40
    assert memories >= 600
    assert sum(categories.values()) >= 300
    assert categories["paraphrase"] >= 80
    assert categories["exact"] >= 80
    assert categories["distractor"] >= 60
    assert categories["non_english"] >= 40
    assert categories["cross_lingual"] >= 40
    # Memories in at least five languages besides English, 10 or more each,
    # asked about in their own language and from others, English included.
    assert len([n for language, n in memory_languages.items() if language != "en" and n >= 10]) >= 5
    assert len(asked_in["non_english"]) >= 5
    assert len(asked_in["cross_lingual"]) >= 5 and "en" in asked_in["cross_lingual"]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_file_is_well_formed(path: pathlib.Path):
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", path.stem), "user ids: lower-case words and dashes"
    records = read(path)
    memories: dict[str, str] = {}
    languages: dict[str, str] = {}
    question_ids: set[str] = set()
    for r in records:
        where = f"{path.name} {r.get('id')}"
        if r.get("kind") == "memory":
            assert set(r) in (MEMORY_FIELDS, MEMORY_FIELDS | {"language"}), where
            assert re.fullmatch(r"m[1-9][0-9]*", r["id"]), where
            assert r["id"] not in memories, f"{where}: duplicate id"
            assert isinstance(r["content"], str) and r["content"].strip(), where
            language = r.get("language", "en")
            assert re.fullmatch(r"[a-z]{2}", language), where
            assert "language" not in r or language != "en", f"{where}: English is the default"
            assert written_in(r["content"], language), f"{where}: not written in {language}"
            memories[r["id"]] = r["content"]
            languages[r["id"]] = language
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
        elif category in ("non_english", "cross_lingual"):
            language = r["language"]
            assert re.fullmatch(r"[a-z]{2}", language), where
            assert written_in(r["question"], language), f"{where}: not written in {language}"
            answered_in = {languages[a] for a in answers}
            if category == "non_english":
                assert language != "en" and answered_in == {language}, (
                    f"{where}: a non_english question is answered in its own language"
                )
            else:
                assert language not in answered_in, (
                    f"{where}: a cross_lingual question is answered in another language"
                )
        else:
            shared = content_words(r["question"]) & set().union(
                *(content_words(memories[a]) for a in answers)
            )
            assert len(shared) <= MAX_SHARED_WORDS, (
                f"{where}: a paraphrase shares {sorted(shared)} with its answer"
            )


# -- conversations: multi-session dialogue, each turn as it was said ----------

CONVERSATIONS = sorted((EVAL_DIR / "conversations").glob("*.jsonl"))
CONVERSATION_CATEGORIES = (
    "single_fact",
    "temporal",
    "multi_hop",
    "updated",
    "paraphrase",
    "open_domain",
)
HEADER_FIELDS = {"kind", "user", "roles", "split"}
ROLES = ("user", "assistant")  # memory.ingest's roles for a person and for the assistant
SPLITS = ("tune", "report")
SESSION_FIELDS = {"kind", "id", "date", "speakers"}
TURN_FIELDS = {"kind", "id", "session", "speaker", "text"}
CONVERSATION_QUESTION_FIELDS = {"kind", "id", "category", "question", "evidence", "answer"}
# A speaker's name is one word: the BM25 baseline reads a turn as
# "[<date>] <speaker>: <text>", and that must read back unambiguously.
SPEAKER = re.compile(r"[^\W\d_][\w'.-]*")
# A turn's text is the speaker's own words: no date before them.
DATED = re.compile(r"\[\d{4}-\d{2}-\d{2}")
# A temporal question asks for a date or a span of time.
TEMPORAL = re.compile(
    r"(when|how long|how many (days|weeks|months)|on what date|what (day|date))\b"
)
# A question is phrased afresh, not lifted from its evidence: no run of this
# many words appears in an evidence turn.
COPIED_WORDS = 6
# Each half of the set holds between these shares of every category's questions.
HALF_SHARE = (0.4, 0.6)


def header(path: pathlib.Path) -> dict:
    """A conversation file's first record: whose it is, the speakers' roles, its half."""
    return read(path)[0]


def test_the_conversations_are_long_and_the_questions_many():
    assert len(CONVERSATIONS) >= 12
    categories: collections.Counter[str] = collections.Counter()
    for path in CONVERSATIONS:
        records = read(path)
        sessions = [r for r in records if r.get("kind") == "session"]
        turns = [r for r in records if r.get("kind") == "turn"]
        assert len(sessions) >= 10, f"{path.name}: at least 10 sessions"
        assert len(turns) >= 200, f"{path.name}: at least 200 turns"
        times = [datetime.datetime.fromisoformat(s["date"]) for s in sessions]
        assert (max(times) - min(times)).days >= 90, f"{path.name}: sessions span months"
        categories.update(r.get("category") for r in records if r.get("kind") == "question")
    assert sum(categories.values()) >= 600
    assert set(categories) == set(CONVERSATION_CATEGORIES)
    assert min(categories.values()) >= 80, categories


def test_the_conversations_split_into_two_alike_halves():
    """Weights are chosen on the ``tune`` half and reported on the other: like for like."""
    files: dict[str, list[str]] = {split: [] for split in SPLITS}
    kinds: dict[str, set[str]] = {split: set() for split in SPLITS}
    categories = {split: collections.Counter[str]() for split in SPLITS}
    for path in CONVERSATIONS:
        first = header(path)
        assert first.get("split") in SPLITS, f"{path.name}: split must be one of {SPLITS}"
        split = first["split"]
        files[split].append(path.stem)
        kinds[split].add("assistant" if "assistant" in first["roles"].values() else "friend")
        categories[split].update(r["category"] for r in read(path) if r["kind"] == "question")
    assert len(files["tune"]) == len(files["report"]), files
    # Both halves hold conversations with an assistant and between friends.
    assert kinds["tune"] == kinds["report"] == {"assistant", "friend"}, kinds
    low, high = HALF_SHARE
    for category in CONVERSATION_CATEGORIES:
        total = categories["tune"][category] + categories["report"][category]
        share = categories["tune"][category] / total
        assert low <= share <= high, f"{category}: {share:.0%} of its questions in tune"


@pytest.mark.parametrize("path", CONVERSATIONS, ids=[p.stem for p in CONVERSATIONS])
def test_conversation_is_well_formed(path: pathlib.Path):
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", path.stem), "user ids: lower-case words and dashes"
    records = read(path)
    first = records[0]
    assert first.get("kind") == "conversation", f"{path.name}: starts with its conversation record"
    assert set(first) == HEADER_FIELDS, path.name
    roles = first["roles"]
    assert isinstance(roles, dict) and all(SPEAKER.fullmatch(s) for s in roles), path.name
    assert set(roles.values()) <= set(ROLES), f"{path.name}: roles are {ROLES}"
    assert roles.get(first["user"]) == "user", f"{path.name}: the end user is a person"

    sessions: dict[str, dict] = {}
    turns: dict[str, dict] = {}  # id -> turn
    contents: set[str] = set()
    order: dict[str, int] = {}  # id -> position in the conversation
    speaking: set[str] = set()
    session = None
    last = None
    for r in records[1:]:
        where = f"{path.name} {r.get('id')}"
        if r.get("kind") == "session":
            assert set(r) == SESSION_FIELDS, where
            assert r["id"] == f"s{len(sessions) + 1}", f"{where}: sessions are s1, s2, ... in order"
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}", r["date"]), (
                f"{where}: date is an ISO time of day with its offset"
            )
            at = datetime.datetime.fromisoformat(r["date"])
            assert last is None or at > last, f"{where}: sessions in time order"
            speakers = r["speakers"]
            assert isinstance(speakers, list) and len(set(speakers)) == len(speakers) >= 2, where
            assert first["user"] in speakers and set(speakers) <= set(roles), where
            session, last, turn = r, at, 0
            sessions[r["id"]] = r
        elif r.get("kind") == "turn":
            assert set(r) == TURN_FIELDS, where
            assert session is not None and r["session"] == session["id"], (
                f"{where}: a turn follows its own session's record"
            )
            turn += 1
            assert r["id"] == f"{session['id']}t{turn}", f"{where}: turns are <session>t1, t2, ..."
            assert r["speaker"] in session["speakers"], f"{where}: unknown speaker"
            text = r["text"]
            assert isinstance(text, str) and text == text.strip() and text, where
            assert not DATED.match(text) and not any(text.startswith(f"{s}:") for s in roles), (
                f"{where}: the text is the speaker's words alone"
            )
            # Stored one per memory, a turn is its session's date, speaker and
            # words; memsvc would keep a repeated memory once.
            content = f"[{session['date'][:10]}] {r['speaker']}: {text}"
            assert content not in contents, f"{where}: duplicate turn"
            contents.add(content)
            speaking.add(r["speaker"])
            order[r["id"]] = len(turns)
            turns[r["id"]] = r
        else:
            assert r.get("kind") == "question", f"{where}: kind must be session, turn or question"
    assert all(any(t.startswith(f"{s}t") for t in turns) for s in sessions), (
        f"{path.name}: an empty session"
    )
    assert speaking == set(roles), f"{path.name}: roles are given for the speakers, all of them"

    question_ids: set[str] = set()
    for r in records[1:]:
        if r["kind"] != "question":
            continue
        where = f"{path.name} {r['id']}"
        assert re.fullmatch(r"q[1-9][0-9]*", r["id"]), where
        assert r["id"] not in question_ids, f"{where}: duplicate id"
        question_ids.add(r["id"])
        category = r.get("category")
        assert category in CONVERSATION_CATEGORIES, f"{where}: category {category!r}"
        extra = {"superseded"} if category == "updated" else set()
        assert set(r) == CONVERSATION_QUESTION_FIELDS | extra, where
        assert isinstance(r["question"], str) and r["question"].strip(), where
        assert isinstance(r["answer"], str) and r["answer"].strip(), where
        evidence = r["evidence"]
        assert isinstance(evidence, list) and evidence, f"{where}: needs evidence"
        assert len(set(evidence)) == len(evidence), f"{where}: repeated evidence"
        missing = [e for e in evidence if e not in turns]
        assert not missing, f"{where}: evidence {missing} are not turns of this conversation"

        question = r["question"].lower().split()
        runs = {" ".join(question[i : i + COPIED_WORDS]) for i in range(len(question))}
        for e in evidence:
            said = " ".join(turns[e]["text"].lower().split())
            copied = [run for run in runs if len(run.split()) == COPIED_WORDS and run in said]
            assert not copied, f"{where}: copied from {e}: {copied}"

        if category == "temporal":
            assert TEMPORAL.match(r["question"].lower()), f"{where}: not a question of time"
        elif category == "multi_hop":
            assert len(evidence) >= 2, f"{where}: multi-hop needs two or more turns"
        elif category == "updated":
            # The answer is the latest statement; what it replaced came before.
            superseded = r["superseded"]
            assert isinstance(superseded, list) and superseded, f"{where}: needs superseded"
            assert all(s in turns for s in superseded), f"{where}: unknown superseded turn"
            assert not set(superseded) & set(evidence), f"{where}: superseded and evidence"
            latest = max(order[e] for e in evidence)
            assert all(order[s] < latest for s in superseded), (
                f"{where}: a superseded turn comes after the latest statement"
            )
        elif category == "paraphrase":
            shared = content_words(r["question"]) & set().union(
                *(content_words(turns[e]["text"]) for e in evidence)
            )
            assert len(shared) <= MAX_SHARED_WORDS, (
                f"{where}: a paraphrase shares {sorted(shared)} with its evidence"
            )


# -- near misses: the answer among look-alikes -----------------------------------

NEAR_MISS = sorted((EVAL_DIR / "near-miss").glob("*.jsonl"))
NEAR_MISS_CATEGORIES = ("name", "code", "number", "date")
NEAR_MISS_QUESTION_FIELDS = {"kind", "id", "category", "question", "answers", "term", "near_misses"}
# Look-alikes: at most this many edits apart, or beginning with the same two characters.
MAX_EDITS = 2
# An answer and each of its near misses share at least this share of their
# words (the key terms left out; of the shorter memory's words).
MIN_SHARED = 0.3


def edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps."""
    d = [[i + j if not i or not j else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def alike(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return edits(a, b) <= MAX_EDITS or a[:2] == b[:2]


def holds(text: str, term: str) -> bool:
    """``term`` in ``text``, case-insensitively, not as part of a longer word or number."""
    return re.search(rf"(?<!\w){re.escape(term.lower())}(?!\w)", text.lower()) is not None


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_edits_and_look_alikes():
    assert edits("INV-20418", "INV-20481") == 1
    assert edits("Radomir", "Radoslav") == 4 and alike("Radomir", "Radoslav")
    assert alike("LH 2417", "LX 2417") and not alike("Smith", "Okafor")
    assert holds("Flight LH 2417 leaves at 7", "lh 2417")
    assert not holds("on 13 May", "3 May") and not holds("LH 2417X", "LH 2417")


def test_the_near_miss_set_is_large():
    questions: collections.Counter[str] = collections.Counter()
    for path in NEAR_MISS:
        questions.update(r["category"] for r in read(path) if r.get("kind") == "question")
    assert len(NEAR_MISS) >= 8
    assert sum(questions.values()) >= 60
    assert set(questions) == set(NEAR_MISS_CATEGORIES)


@pytest.mark.parametrize("path", NEAR_MISS, ids=[p.stem for p in NEAR_MISS])
def test_near_miss_file_follows_the_rules(path: pathlib.Path):
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", path.stem), "user ids: lower-case words and dashes"
    records = read(path)
    memories: dict[str, dict] = {}
    topics: dict[str, list[dict]] = collections.defaultdict(list)
    question_ids: set[str] = set()
    for r in records:
        where = f"{path.name} {r.get('id')}"
        if r.get("kind") == "memory":
            assert set(r) in (MEMORY_FIELDS, MEMORY_FIELDS | {"topic", "term"}), where
            assert re.fullmatch(r"m[1-9][0-9]*", r["id"]) and r["id"] not in memories, where
            memories[r["id"]] = r
            if "topic" in r:
                assert holds(r["content"], r["term"]), f"{where}: its term is not in it"
                topics[r["topic"]].append(r)
        else:
            assert r.get("kind") == "question", f"{where}: kind must be memory or question"
            assert set(r) == NEAR_MISS_QUESTION_FIELDS, where
            assert re.fullmatch(r"q[1-9][0-9]*", r["id"]) and r["id"] not in question_ids, where
            question_ids.add(r["id"])
    texts = collections.Counter(" ".join(m["content"].lower().split()) for m in memories.values())
    assert not [t for t, n in texts.items() if n > 1], f"{path.name}: duplicate memory texts"
    for topic, group in topics.items():
        terms = [m["term"].lower() for m in group]
        assert len(set(terms)) == len(terms), f"{path.name} {topic}: two memories share a term"

    for r in records:
        if r["kind"] != "question":
            continue
        where = f"{path.name} {r['id']}"
        category, term = r["category"], r["term"]
        assert category in NEAR_MISS_CATEGORIES, f"{where}: category {category!r}"
        assert any(ch.isdigit() for ch in term) == (category != "name"), (
            f"{where}: names have no digits; codes, numbers and dates have"
        )
        assert len(r["answers"]) == 1, f"{where}: one answer"
        answer = memories[r["answers"][0]]
        assert answer.get("term") == term, f"{where}: the answer's term is the question's"
        group = topics[answer["topic"]]
        assert sorted(r["near_misses"]) == sorted(m["id"] for m in group if m is not answer), (
            f"{where}: near_misses are the other memories of the topic"
        )
        assert len(group) >= 6, f"{where}: the answer among at least 6 memories of its topic"
        assert holds(r["question"], term), f"{where}: the term is not in the question"
        answer_words = words(answer["content"]) - words(term)
        for near in (memories[n] for n in r["near_misses"]):
            assert not holds(near["content"], term), f"{where}: the term is in {near['id']}"
            assert alike(term, near["term"]), f"{where}: {near['term']!r} does not look like it"
            near_words = words(near["content"]) - words(near["term"])
            overlap = len(answer_words & near_words) / min(len(answer_words), len(near_words))
            assert overlap >= MIN_SHARED, f"{where}: {near['id']} shares too few words"
