"""What a long text may cost: a budget of embedding windows per call, and the rate by cost.

With the bundled model, counted: the app's embedder is the real one wrapped
to count the texts it embeds, so each test says how much embedding a call
did (none, for a refused one) without timing anything.
"""

from __future__ import annotations

import json

import pytest

from tests.support import texts
from tests.support.fake_provider import FakeProvider
from tests.support.helpers import CountingEmbedder
from tests.support.helpers import assert_error
from tests.support.helpers import assert_error_item
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

CHINESE = texts.chinese(65_536)
#: 4 calls' worth with the default 16 windows per call: 56 windows.
FOUR_CALLS = texts.english(5_000, seed=4)


def counted(app):
    """The app's embedder, counting what it embeds from now on."""
    runtime = app.extensions["memsvc"]
    runtime.embedder = CountingEmbedder(runtime.embedder)
    return runtime.embedder


def search(client, auth, text, **more):
    return query(client, "memory.search", {"userId": "u", "query": text, **more}, headers=auth)


def get_all(client, auth):
    return query(client, "memory.getAll", {"userId": "u"}, headers=auth)


def test_the_texts_are_what_the_tests_say(local_embedder):
    assert len(local_embedder.windows(CHINESE)) == 1_821
    four = local_embedder.windows(FOUR_CALLS)
    assert len(four) == 56 and four[0] != FOUR_CALLS  # as a query too: too long to take whole


def test_65k_chinese_characters_are_not_stored_and_nothing_is_embedded(app, client, auth):
    model = counted(app)
    resp = mutate(client, "memory.add", {"userId": "u", "content": CHINESE}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert error["message"] == (
        "Invalid input: content: too long to embed in one call: it needs 1,821 embedding "
        "windows, and one call may use 800 (MEMSVC_MAX_EMBEDDING_WINDOWS); store it as several "
        "shorter memories"
    )
    assert model.texts == 0
    assert data(get_all(client, auth)) == []


@pytest.mark.parametrize("mode", ["semantic", "keyword", "hybrid"])
def test_a_65k_chinese_query_is_refused_before_it_is_embedded(app, client, auth, mode):
    model = counted(app)
    resp = search(client, auth, CHINESE, mode=mode)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.search")
    assert error["message"] == (
        "Invalid input: query: too long to embed in one call: it needs 1,821 embedding "
        "windows, and one call may use 800 (MEMSVC_MAX_EMBEDDING_WINDOWS); search with a "
        "shorter query"
    )
    assert model.texts == 0


def test_an_update_to_65k_chinese_characters_changes_nothing(app, client, auth):
    added = data(mutate(client, "memory.add", {"userId": "u", "content": "short"}, headers=auth))
    model = counted(app)
    resp = mutate(client, "memory.update", {"id": added["id"], "content": CHINESE}, headers=auth)
    assert_error(resp, 400, "BAD_REQUEST", "memory.update")
    assert model.texts == 0
    assert data(query(client, "memory.getById", {"id": added["id"]}, headers=auth)) == added


def test_english_prose_as_long_as_the_size_limit_is_stored_and_found(app, client, auth):
    prose = texts.english(65_536)
    sentence = prose[30_000:].split(". ")[1] + "."  # one from the middle, whole
    for other in ["User is allergic to cats", "User's car is a blue hatchback"]:
        mutate(client, "memory.add", {"userId": "u", "content": other}, headers=auth)
    model = counted(app)
    added = data(mutate(client, "memory.add", {"userId": "u", "content": prose}, headers=auth))
    assert added["content"] == prose
    assert 700 <= model.texts <= 800  # every window of it embedded
    found = data(search(client, auth, sentence, threshold=0))
    assert found[0]["id"] == added["id"]


def test_each_call_of_a_batch_is_checked_on_its_own(app, client, auth):
    model = counted(app)
    inputs = {str(i): {"userId": "u", "query": q} for i, q in enumerate(["tea", CHINESE, "tea"])}
    resp = client.get(
        "/trpc/memory.search,memory.search,memory.search",
        query_string={"batch": "1", "input": json.dumps(inputs)},
        headers=auth,
    )
    assert resp.status_code == 207
    first, second, third = resp.get_json()
    assert first["result"] == third["result"] == {"data": []}
    assert_error_item(second, 400, "BAD_REQUEST", "memory.search")
    assert model.texts == 1  # "tea" once; the second time from the query cache


def test_a_long_text_counts_as_several_calls_against_the_rate(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=10)
    model = counted(client.application)
    for _ in range(2):  # 4 calls each
        data(mutate(client, "memory.add", {"userId": "u", "content": FOUR_CALLS}, headers=auth))
    assert model.texts == 2 * 56
    resp = mutate(client, "memory.add", {"userId": "u", "content": FOUR_CALLS}, headers=auth)
    error = assert_error(resp, 429, "TOO_MANY_REQUESTS", "memory.add")
    assert error["message"] == (
        "Rate limit exceeded: 10 requests per minute; this call's 56 embedding windows count "
        "as 4 calls (one per 16 windows)"
    )
    assert 55 <= int(resp.headers["Retry-After"]) <= 60
    assert model.texts == 2 * 56  # refused before the model ran
    # The refused call counted as one call, not four: one more is left.
    assert get_all(client, auth).status_code == 200
    assert_error(get_all(client, auth), 429, "TOO_MANY_REQUESTS", "memory.getAll")


def test_a_long_query_counts_as_several_calls_too(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=9)
    assert [search(client, auth, FOUR_CALLS).status_code for _ in range(3)] == [200, 200, 429]
    # 4 + 4, and one for the refused call: the minute is used up.
    assert get_all(client, auth).status_code == 429


def test_a_call_costing_more_than_its_keys_whole_minute_is_refused_for_good(configured):
    client, auth = configured(RATE_LIMIT_PER_MINUTE=3)
    model = counted(client.application)
    resp = mutate(client, "memory.add", {"userId": "u", "content": FOUR_CALLS}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert error["message"] == (
        "Invalid input: content: its 56 embedding windows count as 4 calls (one per 16 "
        "windows), more than the 3 calls a minute this API key may make; store it as several "
        "shorter memories"
    )
    assert "Retry-After" not in resp.headers
    assert model.texts == 0


def test_the_budget_and_the_rate_by_cost_are_settings(configured):
    client, auth = configured(MAX_EMBEDDING_WINDOWS=55)
    resp = mutate(client, "memory.add", {"userId": "u", "content": FOUR_CALLS}, headers=auth)
    error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
    assert "needs 56 embedding windows, and one call may use 55" in error["message"]
    client, auth = configured(
        MAX_EMBEDDING_WINDOWS=0, RATE_LIMIT_WINDOWS_PER_CALL=0, RATE_LIMIT_PER_MINUTE=2
    )
    adds = [
        mutate(client, "memory.add", {"userId": "u", "content": FOUR_CALLS}, headers=auth)
        for _ in range(3)
    ]
    assert [resp.status_code for resp in adds] == [200, 200, 429]  # each counts as one


def test_with_an_openai_compatible_endpoint_windows_are_counted_in_characters(configured):
    with FakeProvider(delay=0) as provider:
        client, auth = configured(
            EMBEDDER="openai",
            EMBEDDING_URL=provider.url,
            EMBEDDING_MODEL="fake",
            EMBEDDING_DIMENSIONS=provider.dimensions,
            EMBEDDING_WINDOW_CHARS=100,
            MAX_EMBEDDING_WINDOWS=20,
            RATE_LIMIT_PER_MINUTE=5,
        )
        model = counted(client.application)
        long = texts.chinese(3_000)
        resp = mutate(client, "memory.add", {"userId": "u", "content": long}, headers=auth)
        error = assert_error(resp, 400, "BAD_REQUEST", "memory.add")
        assert "one call may use 20 (MEMSVC_MAX_EMBEDDING_WINDOWS)" in error["message"]
        assert model.texts == 0
        fits = texts.chinese(1_000)  # 13 windows of at most 100 characters: 1 call
        data(mutate(client, "memory.add", {"userId": "u", "content": fits}, headers=auth))
        assert model.texts == 13
        assert data(search(client, auth, fits, threshold=0))[0]["content"] == fits
