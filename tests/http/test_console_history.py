"""A memory's history page: what it costs is bounded, and it is paid inside the call's slot."""

import random
import threading

import pytest

from memsvc.api.console import diff
from memsvc.api.context import store
from memsvc.services import keys
from tests.http.test_console_http import sign_in

WORDS = [f"w{i}" for i in range(400)]


def prose(words: int, seed: int) -> str:
    """Text of ``words`` words drawn from a small vocabulary: two such texts share words
    everywhere and sequences nowhere, the costliest pair to compare."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def both(runs):
    """The two texts a diff's runs say it compared."""
    return (
        "".join(text for kind, text in runs if kind != "ins"),
        "".join(text for kind, text in runs if kind != "del"),
    )


def test_a_small_edit_of_a_long_text_is_shown_word_by_word():
    before = prose(9000, 1)
    words = before.split(" ")
    after = " ".join([*words[:3000], "a", "new", "clause", *words[3000:6000], "seven",
                      *words[6001:]])  # fmt: skip
    compared = diff.words(before, after)
    assert compared.word_by_word and both(compared.runs) == (before, after)
    changed = [(kind, text.strip()) for kind, text in compared.runs if kind != "same"]
    assert changed == [("ins", "a new clause"), ("del", words[6000]), ("ins", "seven")]


def test_random_pairs_are_shown_whole_and_minimal():
    """The runs always spell both texts; when the budget allows, as few words change as can."""
    import difflib

    rng = random.Random(5)
    for _ in range(300):
        before = " ".join(rng.choice(WORDS[:6]) for _ in range(rng.randint(0, 40)))
        after = " ".join(rng.choice(WORDS[:6]) for _ in range(rng.randint(0, 40)))
        compared = diff.words(before, after)
        assert compared.word_by_word and both(compared.runs) == (before, after)
        a, b = diff._TOKENS.findall(before), diff._TOKENS.findall(after)
        kept = sum(len(diff._TOKENS.findall(text)) for kind, text in compared.runs
                   if kind == "same")  # fmt: skip
        # No fewer kept than difflib finds (Myers' script is a shortest one).
        blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        assert kept >= sum(block.size for block in blocks)


def test_a_page_of_versions_that_share_nothing_costs_its_budget_at_most():
    history = [
        {"version": i + 1, "content": prose(10_000, i), "metadata": {"n": prose(500, 100 + i)},
         "event": "update", "at": "2026-01-01T00:00:00.000Z"}
        for i in range(8)
    ]  # fmt: skip
    budget = diff.Budget()
    shown = diff.versions(history, budget)
    assert 0 <= budget.left < diff.PAGE_STEPS
    # Newest first; each still spells both of its texts.
    assert [v["version"] for v in shown] == list(range(8, 0, -1))
    for newer, older in zip(shown, shown[1:], strict=False):
        assert not newer["word_by_word"]
        assert both(newer["content_runs"]) == (older["content"], newer["content"])


@pytest.fixture
def history_of(app, client, key):
    """A memory of ``versions`` contents made by ``text(i)``, its page's client signed in."""

    def make(versions, text):
        sign_in(client, key)
        headers = {"x-api-key": key}
        made = client.post(
            "/trpc/memory.add", json={"userId": "u", "content": text(0)}, headers=headers
        ).json["result"]["data"]
        for i in range(1, versions):
            updated = client.post(
                "/trpc/memory.update", json={"id": made["id"], "content": text(i)}, headers=headers
            )
            assert updated.status_code == 200, updated.text[:300]
        return made["id"]

    return make


def test_versions_too_different_to_compare_are_shown_replaced_whole(client, history_of):
    memory_id = history_of(2, lambda i: prose(1500, i))
    page = client.get("/console/memory", query_string={"id": memory_id})
    assert page.status_code == 200
    assert page.text.count("Too many changes to compare word by word") == 1


def test_a_key_allowed_one_call_at_a_time_renders_one_page_at_a_time(
    app, client, history_of, monkeypatch
):
    memory_id = history_of(2, lambda i: f"version {i} of a note")
    with app.app_context():
        (record,) = keys.list_for(store(), "tenant-A")
        keys.set_limits(store(), record.id, None, 1)
    rendering, go_on = threading.Event(), threading.Event()
    real = diff.versions

    def held(history, *args):
        # The first page stops in its diff until told to go on.
        if not rendering.is_set():
            rendering.set()
            assert go_on.wait(30)
        return real(history, *args)

    monkeypatch.setattr(diff, "versions", held)
    first: list = []
    other = app.test_client()
    other.set_cookie(
        "memsvc_console", client.get_cookie("memsvc_console", path="/console").value,
        path="/console",
    )  # fmt: skip
    thread = threading.Thread(
        target=lambda: first.append(other.get("/console/memory", query_string={"id": memory_id}))
    )
    thread.start()
    try:
        assert rendering.wait(30)
        # While the first page renders, the key's one slot is taken.
        second = client.get("/console/memory", query_string={"id": memory_id})
        assert second.status_code == 429, second.text[:300]
        assert "Too many concurrent requests" in second.text
    finally:
        go_on.set()
        thread.join(30)
    assert first[0].status_code == 200
    # And once it is done, the next page renders.
    assert client.get("/console/memory", query_string={"id": memory_id}).status_code == 200
