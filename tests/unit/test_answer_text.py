"""Answers written as JSON text directly are the very bytes encoding their values gives."""

from __future__ import annotations

import gc

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from memsvc import wire
from memsvc.api import outputs
from memsvc.models import Memory
from memsvc.models import ScoredMemory

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
_ms = st.integers(0, 253402300799999)  # up to the year 9999

memories = st.builds(
    Memory,
    id=st.uuids().map(str),
    tenant=st.text(min_size=1),
    user_id=st.text(min_size=1),
    # Any text: quotes, backslashes, control characters, astral and lone surrogates.
    content=st.text(min_size=1) | st.just('a "quoted" \\ line\nand \ud800 \U0001f600'),
    metadata=st.dictionaries(st.text(max_size=8), _json, max_size=4),
    created_at=_ms,
    updated_at=_ms,
    expires_at=st.none() | _ms,
    version=st.integers(1, 1000),
)
fractions = st.floats(0, 1) | st.sampled_from([0.0, 1.0, 0.5, 1e-7, 2.5e-05, 0.1 + 0.2])
scored = st.builds(
    ScoredMemory,
    memory=memories,
    similarity=fractions,
    matched_by=st.none() | st.sampled_from([("keyword",), ("semantic",), ("keyword", "semantic")]),
    keyword=st.none() | fractions,
    score=st.none() | fractions | st.floats(0, 40),
)


@settings(max_examples=300, deadline=None)
@given(memories)
def test_a_memorys_text_is_its_encoded_json(memory):
    assert wire.memory_text(memory) == wire.encode(wire.MEMORY.json(memory))
    assert wire.memory_text(memory) == wire.memory_text(memory)  # kept, the same


@settings(max_examples=200, deadline=None)
@given(st.lists(scored, max_size=6), st.booleans())
def test_a_search_answers_text_is_its_encoded_json(results, explain):
    answer = outputs.SearchAnswer(results, explain=explain)
    output = outputs.SEARCH_RESULTS
    assert output.encode(answer) == wire.encode(output.dump(answer))


@settings(max_examples=100, deadline=None)
@given(st.lists(memories, max_size=5))
def test_memory_and_list_answers_text_is_their_encoded_json(found):
    for memory in found:
        assert outputs.MEMORY.encode(memory) == wire.encode(outputs.MEMORY.dump(memory))
    assert outputs.MEMORIES.encode(found) == wire.encode(outputs.MEMORIES.dump(found))


def test_a_kept_text_goes_with_its_memory():
    memory = Memory("6b0c0a5e-3f1d-4f0e-9c7e-2b1e6e1f8a00", "t", "u", "secret words", {}, 1, 1)
    text = wire.memory_text(memory)
    assert "secret words" in text
    assert any(kept is text for _, kept in wire._TEXTS.values())
    del memory
    gc.collect()
    assert not any("secret words" in kept for _, kept in wire._TEXTS.values())
