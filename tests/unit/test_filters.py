"""Metadata filters: their exact meaning, and the cached evaluation agreeing with it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from memsvc.search import columns as columns_module
from memsvc.search import filters
from memsvc.search import matching
from tests.support import figures

DOC = {
    "category": "health",
    "n": 1,
    "f": 1.5,
    "flag": True,
    "none": None,
    "tags": ["a", "b"],
    "deep": {"x": {"y": 2}},
    "when": "2026-05-01T10:00:00+02:00",
    "day": "2026-05-01",
    "text": "Alice likes Jazz",
    "obj": {"k": 1, "j": [1, 2]},
}


@pytest.mark.parametrize(
    "flt, expected",
    [
        ({}, True),
        ({"category": "health"}, True),
        ({"category": "Health"}, False),
        ({"n": 1}, True),
        ({"n": 1.0}, True),  # one JSON number
        ({"n": "1"}, False),  # typed: 1, "1" and true differ
        ({"n": True}, False),
        ({"flag": 1}, False),
        ({"flag": True}, True),
        ({"none": None}, True),  # null matches a key present with null
        ({"missing": None}, False),
        ({"tags": ["a", "b"]}, True),  # arrays as a whole, in order
        ({"tags": ["b", "a"]}, False),
        ({"obj": {"eq": {"j": [1, 2], "k": 1}}}, True),  # objects as a whole, any key order
        ({"deep.x.y": 2}, True),
        ({"deep.x": {"eq": {"y": 2}}}, True),
        ({"deep.x.z": {"exists": False}}, True),
        ({"category": {"ne": "work"}}, True),
        ({"missing": {"ne": "x"}}, True),  # ne also matches memories without the key
        ({"category": {"in": ["work", "health"]}}, True),
        ({"category": {"in": []}}, False),
        ({"missing": {"nin": ["x"]}}, True),
        ({"n": {"nin": [1]}}, False),
        ({"n": {"gt": 0}}, True),
        ({"n": {"gte": 1}}, True),
        ({"n": {"lt": 1}}, False),
        ({"f": {"lte": 1.5}}, True),
        ({"category": {"gt": 0}}, False),  # numbers compare with numbers only
        ({"flag": {"gt": 0}}, False),
        ({"when": {"lt": "2026-05-01T09:00:00Z"}}, True),  # 08:00Z
        ({"when": {"gte": "2026-05-01T08:00:00.001Z"}}, False),
        ({"day": {"gte": "2026-05-01T00:00:00Z"}}, True),  # a stored date reads as UTC
        ({"text": {"gt": "2026-01-01T00:00:00Z"}}, False),  # not a timestamp: no match
        ({"n": {"lt": "2030-01-01T00:00:00Z"}}, False),
        ({"text": {"contains": "likes"}}, True),
        ({"text": {"contains": "jazz"}}, False),  # case-sensitive
        ({"tags": {"contains": "a"}}, True),  # member of an array
        ({"tags": {"contains": "ab"}}, False),
        ({"n": {"contains": 1}}, False),
        ({"none": {"exists": True}}, True),  # present even as null
        ({"category": "health", "n": {"gt": 5}}, False),  # ANDed
    ],
)
def test_what_a_filter_matches(flt, expected):
    parsed = filters.parse(flt)
    assert parsed.matches(DOC) is expected
    columns = columns_module.Columns([json.dumps(DOC), json.dumps({})])
    assert list(columns.mask(parsed)) == [expected, filters.parse(flt).matches({})]


@pytest.mark.parametrize(
    "flt, message",
    [
        ({"a": {"like": 1}}, "a: unknown operator 'like'"),
        ({"a": {"in": 1}}, "a.in: must be an array of values"),
        ({"a": {"nin": "x"}}, "a.nin: must be an array of values"),
        ({"a": {}}, "a: an operator object must have exactly one operator"),
        ({"a": {"gt": 1, "lt": 3}}, "a: an operator object must have exactly one operator"),
        ({"a": {"gt": "soon"}}, "a.gt: 'soon' is not an ISO 8601 timestamp"),
        ({"a": {"gt": True}}, "a.gt: must be a number or an ISO 8601 timestamp"),
        ({"a": {"lte": None}}, "a.lte: must be a number or an ISO 8601 timestamp"),
        ({"a": {"exists": 1}}, "a.exists: must be true or false"),
        ({"a..b": 1}, "a..b: a metadata key must not be empty"),
        ("x", "must be an object"),
    ],
)
def test_a_malformed_filter_names_what_is_wrong(flt, message):
    with pytest.raises(filters.InvalidFilter) as e:
        filters.parse(flt)
    assert message in str(e.value)


# -- the cached evaluation agrees with the plain one, on anything ------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 1.5, -2.5, 1e20]),
    st.sampled_from(["a", "b", "A", "ab", "", "2026-05-01T10:00:00Z", "2026-05-02", "x y"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abk"), inner, max_size=2)
    ),
    max_leaves=4,
)
KEYS = ["a", "b", "k", "a.b", "k.a"]
metadata = st.dictionaries(st.sampled_from(["a", "b", "k"]), values, max_size=3)
operators = st.one_of(
    values.map(lambda v: v if not isinstance(v, dict) else {"eq": v}),
    st.builds(lambda op, v: {op: v}, st.sampled_from(["eq", "ne", "contains"]), values),
    st.builds(lambda op, v: {op: v}, st.sampled_from(["in", "nin"]), st.lists(values, max_size=3)),
    st.builds(
        lambda op, v: {op: v},
        st.sampled_from(["gt", "gte", "lt", "lte"]),
        st.one_of(
            st.integers(-3, 3),
            st.sampled_from([0.5, 1.0, 1e20, "2026-05-01T10:00:00Z", "2026-05-01T12:00:00+02:00"]),
        ),
    ),
    st.builds(lambda v: {"exists": v}, st.booleans()),
)
filters_ = st.dictionaries(st.sampled_from(KEYS), operators, max_size=3)


@settings(max_examples=300 * figures.SCALE, deadline=None)
@given(docs=st.lists(metadata, min_size=1, max_size=8), flt=filters_)
def test_the_cached_columns_answer_as_matches_does(docs, flt):
    parsed = filters.parse(flt)
    expected = [parsed.matches(d) for d in docs]
    columns = columns_module.Columns([json.dumps(d) for d in docs])
    assert list(columns.mask(parsed)) == expected
    figures.count("filter evaluations", len(docs), "memories checked against the plain filter")


@settings(max_examples=150 * figures.SCALE, deadline=None)
@given(
    before=st.lists(metadata, min_size=1, max_size=6),
    after=st.lists(metadata, max_size=4),
    flt=filters_,
)
def test_columns_extended_with_new_memories_answer_as_built_afresh(before, after, flt):
    parsed = filters.parse(flt)
    columns = columns_module.Columns([json.dumps(d) for d in before])
    columns.mask(parsed)  # built, then extended as the search cache does on new memories
    grown = columns.extended([json.dumps(d) for d in after])
    assert list(grown.mask(parsed)) == [parsed.matches(d) for d in before + after]
    assert list(columns.mask(parsed)) == [parsed.matches(d) for d in before]


@settings(max_examples=150 * figures.SCALE, deadline=None)
@given(docs=st.lists(metadata, min_size=1, max_size=5), order=st.randoms(), flt=filters_)
def test_columns_over_repeated_texts_answer_as_each_text_alone(docs, order, flt):
    """Equal texts are parsed once and their columns copied: the same answers."""
    parsed = filters.parse(flt)
    texts = [json.dumps(d) for d in docs] * 3
    order.shuffle(texts)
    columns = columns_module.Columns(texts)
    assert list(columns.mask(parsed)) == [parsed.matches(json.loads(text)) for text in texts]


def test_a_condition_compares_no_more_than_its_operand_whatever_the_value():
    """An equality against a huge value walks the operand only (and stops at a difference)."""
    huge = {"a": {f"k{i}": {"deep": list(range(50))} for i in range(2000)}}
    steps = []
    original = matching.kind

    def counting(value):
        steps.append(1)
        return original(value)

    for flt, expected in (
        ({"a": {"ne": {"k1": 1}}}, True),
        ({"a.k1": {"eq": {"deep": [0, 1]}}}, False),
        ({"a.k1.deep": {"in": [[0], "x", 3]}}, False),
        ({"a.k1.deep": {"contains": 49}}, True),
    ):
        parsed = filters.parse(flt)
        steps.clear()
        matching.kind = counting
        try:
            assert parsed.matches(huge) is expected
        finally:
            matching.kind = original
        assert len(steps) < 200, (flt, len(steps))
