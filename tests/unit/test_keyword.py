"""Keyword search ranks by the calling user's own memories: nothing of anyone else's shows.

The attack these tests replay: with one key, store ``banana ctlq1`` and
``banana W`` for an end user and search ``W ctlq1``; with statistics over
every tenant's memories, which comes first (and the scores) moved when
someone else stored a memory holding ``W``, and varying how often the
control word occurs read back how many such memories exist.
"""

from __future__ import annotations

import pathlib
import random
import re

import numpy as np
import pytest

from memsvc import terms
from memsvc.search import SearchCache
from memsvc.search import bm25
from memsvc.services import memories
from tests.support.helpers import HashEmbedder

EMBEDDER = HashEmbedder(16)
MINE = ["banana ctlq1", "banana W", "a banana split for two", "ctlq1 ctlq1 quarterly report"]


def add(store, tenant, user, content):
    return memories.add(store, EMBEDDER, tenant, user, content, {})


def results(store, cache, mode):
    """What the caller sees of a search, and the keyword scores behind its order."""
    found = memories.search(store, EMBEDDER, "tenant-A", "u", "W ctlq1", 10, 0.0, cache, mode=mode)
    return [(r.memory.id, r.similarity, getattr(r, "keyword", 0), r.matched_by) for r in found]


def everything(store, cache):
    return {mode: results(store, cache, mode) for mode in ("keyword", "hybrid")}


@pytest.mark.parametrize("path", ["cached snapshot", "store"])
def test_other_tenants_and_users_never_change_a_ranking_or_a_score(store, path):
    cache = SearchCache(64 * 2**20, EMBEDDER.dimensions) if path == "cached snapshot" else None
    for content in MINE:
        add(store, "tenant-A", "u", content)
    baseline = everything(store, cache)
    assert [r[0] for r in baseline["keyword"]] and all(
        r[2] is not None and r[2] > 0 for r in baseline["keyword"]
    )

    others = []
    # Another tenant, then another end user of the same tenant: one memory
    # holding W, then three, then many and long; then deletes and an erasure.
    for tenant, user in (("tenant-B", "u"), ("tenant-A", "u2")):
        for n in (1, 3, 12):
            for i in range(n):
                text = "W " * (1 + i % 5) + f"ctlq1 banana filler words {i}" * (i % 3)
                others.append((tenant, add(store, tenant, user, text).id))
            assert everything(store, cache) == baseline, (tenant, user, n)
    for tenant, memory_id in others[::2]:
        memories.delete(store, tenant, memory_id)
    assert everything(store, cache) == baseline
    memories.delete_all(store, "tenant-B", "u")
    memories.delete_all(store, "tenant-A", "u2")
    assert everything(store, cache) == baseline

    # The user's own memories are what counts: the check can fail.
    add(store, "tenant-A", "u", "W W W and W again")
    assert everything(store, cache) != baseline


def test_bm25_ranks_rarer_words_more_frequent_mentions_and_shorter_texts_first():
    rare, common = terms.term_hash("rare"), terms.term_hash("common")
    postings = [
        # (term, seq, tf, dl)
        (common, 1, 1, 10),
        (common, 2, 1, 10),
        (common, 3, 1, 10),
        (rare, 3, 1, 10),
        (common, 4, 3, 10),
        (common, 5, 1, 100),
    ]
    found = bm25.rank(postings, {rare: False, common: False}, documents=6, total_terms=150)
    order = found.seqs.tolist()
    assert order[0] == 3  # holds the rare word
    assert order.index(4) < order.index(2)  # three mentions beat one
    assert order.index(2) < order.index(5)  # the same mention in a shorter text
    assert order.index(2) < order.index(1)  # ties: the newest first
    assert np.all(found.bm25 > 0) and np.all(np.diff(found.bm25) <= 0)
    strength = dict(zip(order, found.strength.tolist(), strict=True))
    assert strength[3] == pytest.approx(1.0)  # holds every word of the query
    assert 0 < strength[1] == strength[4] == strength[5] < 0.5  # only the common one


def test_a_query_word_no_memory_holds_weighs_as_the_rarest():
    held = bm25.rank([(7, 1, 1, 5)], {7: False}, documents=10, total_terms=50).strength[0]
    assert held == pytest.approx(1.0)
    half = bm25.rank([(7, 1, 1, 5)], {7: False, 8: False}, 10, 50).strength[0]
    # The word held is held by one memory, as rare as a word can be: an even share.
    assert half == pytest.approx(0.5)
    common = bm25.rank([(7, i, 1, 5) for i in range(1, 8)], {7: False, 8: False}, 10, 50)
    assert common.strength[0] < 0.25  # a word most memories hold: a small share
    # A code weighs three times its rarity: holding it is most of the query.
    code = bm25.rank([(7, 1, 1, 5)], {7: True, 8: False}, 10, 50).strength[0]
    assert code == pytest.approx(0.75)
    assert terms.codes("What's wrong with bay 241?") == {
        terms.term_hash("wrong"): False,
        terms.term_hash("bay"): False,
        terms.term_hash("241"): True,
    }


def test_words_are_stemmed_folded_and_cut_into_pairs_where_scripts_have_no_spaces():
    assert terms.query_terms("Swimming") == terms.query_terms("swims")
    assert terms.query_terms("CAFÉ") == terms.query_terms("cafe")
    assert terms.words("INV-0234 Ｏｒｄｅｒ") == ["inv", "0234", "order"]
    assert terms.words("北京大学") == ["北京", "京大", "大学"]
    assert set(terms.query_terms("北京")) <= set(terms.terms("我在北京大学读书"))
    # Common words are no terms: they match nearly everything.
    assert terms.query_terms("what is the order") == terms.query_terms("order")
    assert terms.query_terms("what is it") == []


def test_words_are_stemmed_by_snowballs_c_build_with_the_pure_python_ones_stems():
    """Import stems every word it has not met: the C build is the one in use, and it stems
    as the pure-Python build that indexed earlier databases (every word of the docs)."""
    import Stemmer
    from snowballstemmer.english_stemmer import EnglishStemmer

    assert isinstance(terms._stemmer, Stemmer.Stemmer)
    docs = pathlib.Path(__file__).parents[2] / "docs"
    words = {
        word.lower()
        for page in docs.glob("*.md")
        for word in re.findall("[A-Za-z]{3,}", page.read_text(encoding="utf-8"))
    }
    assert len(words) > 2000
    pure = EnglishStemmer()
    assert {w: terms._stemmer.stemWord(w) for w in words} == {w: pure.stemWord(w) for w in words}


def test_ascii_text_is_cut_into_the_words_the_general_rule_finds():
    """ASCII text takes a quicker pattern: every ASCII character, mixed, splits the same."""
    rng = random.Random(5)
    alphabet = [chr(i) for i in range(128)]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        text += rng.choice(["", "a" * 70, " x_y ", "INV-0042"])
        general = [
            run[: terms.MAX_TERM_CHARS] for run in terms._WORD.findall(terms.normalise(text))
        ]
        assert terms.words(text) == general, text
    assert terms.words("snake_case a1b2 " + "z" * 70) == ["snake", "case", "a1b2", "z" * 64]


def test_the_cached_and_the_store_path_answer_alike(store):
    """Keyword cosines come from the cached snapshot when the user is cached: the same
    stored vectors, so the same numbers as read from the store."""
    for i, content in enumerate(MINE * 3):
        add(store, "tenant-A", "u", f"{content} {i}")
    memories.delete(store, "tenant-A", add(store, "tenant-A", "u", "W ctlq1 gone").id)
    cache = SearchCache(64 * 2**20, EMBEDDER.dimensions)
    for mode in ("keyword", "hybrid"):
        args = (store, EMBEDDER, "tenant-A", "u", "W ctlq1", 10, 0.0)
        cached = memories.search(*args, cache, mode=mode)
        plain = memories.search(*args, None, mode=mode)
        assert cached == plain
        assert len(cached) == (9 if mode == "keyword" else 10)
    assert cache.users() == 1
