"""Search modes: keyword and hybrid next to semantic, the threshold always a cosine floor."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from memsvc import clock
from memsvc.embeddings import Embedder
from tests.support import figures
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

MEMORIES = [
    ("order", "Order 10482 was delivered two days late", {"kind": "order"}),
    ("other order", "Order 10483 arrived on time", {"kind": "order"}),
    ("invoice", "The invoice INV-0234 is still unpaid", {"kind": "bill"}),
    ("tea", "The user likes green tea in the afternoon", {"kind": "taste"}),
    ("cat", "Her cat Biscuit sleeps on the radiator", {"kind": "pet"}),
]


@pytest.fixture
def memories(client, auth):
    ids = {}
    for name, content, metadata in MEMORIES:
        body = {"userId": "u", "content": content, "metadata": metadata}
        ids[name] = data(mutate(client, "memory.add", body, headers=auth))["id"]
    return ids


def search(client, auth, text, **fields):
    body = {"userId": "u", "query": text, "threshold": 0, **fields}
    return data(query(client, "memory.search", body, headers=auth))


def test_keyword_mode_finds_the_exact_term_and_only_what_matches_a_word(client, auth, memories):
    found = search(client, auth, "what happened with order 10482?", mode="keyword")
    assert [m["id"] for m in found][0] == memories["order"]
    assert {m["id"] for m in found} == {memories["order"], memories["other order"]}
    assert all(m["matchedBy"] == ["keyword"] for m in found)
    for m in found:  # similarity is still the cosine
        [same] = [
            s for s in search(client, auth, "what happened with order 10482?") if s["id"] == m["id"]
        ]
        assert m["similarity"] == same["similarity"]
    assert search(client, auth, "INV-0234", mode="keyword")[0]["id"] == memories["invoice"]
    assert search(client, auth, "biscuit", mode="keyword")[0]["id"] == memories["cat"]
    assert search(client, auth, "zebra crossing", mode="keyword") == []


def test_the_threshold_is_a_cosine_floor_in_every_mode(client, auth, memories):
    for mode in ("semantic", "keyword", "hybrid"):
        found = search(client, auth, "order 10482", mode=mode, threshold=0.6)
        assert found and all(m["similarity"] >= 0.6 for m in found), mode
        assert memories["invoice"] not in {m["id"] for m in found}
    # A keyword match whose cosine is under the threshold is not returned.
    weak = search(client, auth, "radiator", mode="keyword")
    assert weak and weak[0]["similarity"] < 0.9
    assert search(client, auth, "radiator", mode="keyword", threshold=0.9) == []


def test_hybrid_mode_says_who_found_each_memory_and_puts_exact_terms_first(client, auth, memories):
    found = search(client, auth, "Is order 10483 late?", mode="hybrid")
    assert found[0]["id"] == memories["other order"]
    assert found[0]["matchedBy"] == ["keyword", "semantic"]
    assert {tuple(m["matchedBy"]) for m in found} <= {
        ("keyword", "semantic"),
        ("keyword",),
        ("semantic",),
    }
    assert "matchedBy" not in search(client, auth, "Is order 10483 late?")[0]


def test_keyword_and_hybrid_modes_honour_filters_expiry_and_the_user(client, auth, memories):
    for mode in ("keyword", "hybrid"):
        found = search(client, auth, "order", mode=mode, filter={"kind": "bill"})
        assert memories["order"] not in {m["id"] for m in found}
    soon = clock.iso(clock.now_ms() + 400)
    mutate(client, "memory.update", {"id": memories["cat"], "expiresAt": soon}, headers=auth)
    time.sleep(0.5)
    assert search(client, auth, "Biscuit", mode="keyword") == []
    other = {"userId": "someone-else", "query": "order 10482", "threshold": 0, "mode": "keyword"}
    assert data(query(client, "memory.search", other, headers=auth)) == []


def test_an_unknown_mode_is_400(client, auth):
    for mode in ("fuzzy", 3, None):
        body = {"userId": "u", "query": "x", "mode": mode}
        error = assert_error(
            query(client, "memory.search", body, headers=auth), 400, "BAD_REQUEST", "memory.search"
        )
        assert "mode:" in error["message"]


@settings(
    max_examples=60 * figures.SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    text=st.one_of(
        st.text(min_size=1, max_size=60),
        st.sampled_from(
            [
                '"',
                '""',
                "AND",
                "NOT x",
                "a OR",
                "NEAR(a b)",
                "*",
                "col:x",
                "(",
                ")",
                "^a",
                "-",
                "a+b",
                'scope:"x"',
                "content : (x)",
                "{scope} x",
                "'; DROP TABLE memories; --",
            ]
        ),
    )
)
def test_no_query_text_is_ever_read_as_fts_syntax(client, auth, memories, text):
    if not text.strip() or "\x00" in text:
        return
    body = {"userId": "u", "query": text, "threshold": 0, "mode": "keyword"}
    resp = query(client, "memory.search", body, headers=auth)
    assert resp.status_code in (200, 400), resp.get_json()
    if resp.status_code == 400:  # only the text rules of the API (lone surrogates)
        assert "query:" in resp.get_json()["error"]["message"]
    figures.count("keyword queries", unit="hostile keyword queries answered")


def test_one_tenants_searches_never_warm_the_query_cache_for_another(app, new_key):
    """What others searched is not visible by timing: a query another tenant asked costs
    what a new query costs (the model runs again)."""
    calls = []
    model = app.extensions["memsvc"].embedder

    class Counting(Embedder):
        model_id, dimensions = model.model_id, model.dimensions
        batch_invariant = model.batch_invariant

        def windows(self, text):
            return model.windows(text)

        def embed(self, texts):
            calls.append(list(texts))
            return model.embed(texts)

        def warm_up(self):
            pass

    app.extensions["memsvc"].embedder = Counting()
    client = app.test_client()
    question = " ".join(f"word{i}" for i in range(120))
    body = {"userId": "u", "query": question, "threshold": 0}
    embedded = []  # texts the model embedded, after each search
    for tenant in ("tenant-A", "tenant-B", "tenant-A", "tenant-B"):
        headers = {"x-api-key": new_key(tenant)}
        assert data(query(client, "memory.search", body, headers=headers)) == []
        embedded.append(sum(len(c) for c in calls))
    # The model runs for each tenant's first search, then each hits its own entries.
    assert embedded[0] > 0 and embedded[1] == 2 * embedded[0]
    assert embedded[3] == embedded[1]


@pytest.mark.parametrize("cache_mb", [256, 0], ids=["cached", "uncached"])
def test_keyword_ranking_reads_back_nothing_of_other_tenants_words(configured, cache_mb):
    """The attack, black box: one key stores 'banana ctlq1' and 'banana W' (and the control
    word once more, so that W is the rarer of the two), searches 'W ctlq1', and watches the
    order while others store and delete memories holding W."""
    client, auth = configured(SEARCH_CACHE_MB=cache_mb)
    for content in ("banana ctlq1", "banana W", "ctlq1 and more"):
        mutate(client, "memory.add", {"userId": "u", "content": content}, headers=auth)

    def seen():
        return {
            mode: [
                (m["id"], m["similarity"], m.get("matchedBy"))
                for m in search(client, auth, "W ctlq1", mode=mode)
            ]
            for mode in ("keyword", "hybrid")
        }

    baseline = seen()
    assert len(baseline["keyword"]) == 3
    with client.application.app_context():
        from memsvc.api.context import store as request_store
        from memsvc.services import keys

        other = {"x-api-key": keys.create(request_store(), "tenant-B", "b", "memsvc").secret}
    planted = []
    for headers, user in ((other, "u"), (auth, "someone-else")):
        for _ in range(3):
            body = {"userId": user, "content": "W"}
            m = data(mutate(client, "memory.add", body, headers=headers))
            planted.append((headers, m["id"]))
            assert seen() == baseline
    for headers, memory_id in planted:
        mutate(client, "memory.delete", {"id": memory_id}, headers=headers)
        assert seen() == baseline


def test_no_tenant_can_count_the_queries_others_ask(configured):
    """Each tenant's recent queries are its own: however many distinct queries another
    tenant asks, a query asked before stays as fast (no other tenant's entry evicts it),
    and a tenant's own queries evict its own, least recently asked first."""
    client, auth = configured(QUERY_CACHE_ENTRIES=4)
    calls = []
    model = client.application.extensions["memsvc"].embedder

    class Counting(Embedder):
        model_id, dimensions = model.model_id, model.dimensions
        batch_invariant = model.batch_invariant

        def windows(self, text):
            return model.windows(text)

        def embed(self, texts):
            calls.extend(texts)
            return model.embed(texts)

        def warm_up(self):
            pass

    client.application.extensions["memsvc"].embedder = Counting()
    with client.application.app_context():
        from memsvc.api.context import store as request_store
        from memsvc.services import keys

        other = {"x-api-key": keys.create(request_store(), "tenant-B", "b", "memsvc").secret}

    def ask(headers, text):
        before = len(calls)
        body = {"userId": "u", "query": text, "threshold": 0}
        assert data(query(client, "memory.search", body, headers=headers)) == []
        return len(calls) > before  # whether the model ran

    assert ask(auth, "what does the user eat?")
    for i in range(6):  # more distinct queries than the cache holds, by another tenant
        assert ask(other, f"question {i} of tenant B")
    assert not ask(auth, "what does the user eat?")
    assert not ask(other, "question 5 of tenant B")
    assert ask(other, "question 0 of tenant B")  # its own oldest went, for its own
