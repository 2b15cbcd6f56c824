"""What memsvc asks the model (memsvc.extraction.prompt): the chat's exact shape, the labels,
the instructions, a schema OpenAI's strict mode takes, and the docs that quote them."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import typing as t

import jsonschema
import pytest

from memsvc import generated_docs
from memsvc.extraction import prompt
from memsvc.extraction.prompt import INSTRUCTIONS
from memsvc.extraction.prompt import SCHEMA
from memsvc.models import Memory
from memsvc.models import Moment

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "extraction.md"


def moment(text: str) -> Moment:
    when = dt.datetime.fromisoformat(text)
    offset = when.utcoffset()
    assert offset is not None
    return Moment(int(when.timestamp() * 1000), int(offset.total_seconds() // 60))


def message(id: str, content: str, at: str, role: str = "user", speaker: str | None = None):
    when = moment(at)
    return Memory(
        id=id,
        tenant="t",
        user_id="u",
        content=content,
        metadata={},
        created_at=when.ms + 5,
        updated_at=when.ms + 5,
        kind="message",
        occurred_at=when.ms,
        offset=when.offset,
        session_id="s",
        role=role,
        speaker=speaker,
    )


def fact(id: str, content: str, created: str, occurred: str | None = None) -> Memory:
    made = moment(created)
    when = moment(occurred) if occurred else None
    return Memory(
        id=id,
        tenant="t",
        user_id="u",
        content=content,
        metadata={},
        created_at=made.ms,
        updated_at=made.ms,
        kind="fact",
        occurred_at=when.ms if when else None,
        offset=(when or made).offset,
    )


M1 = message("id-m1", "Yesterday I moved to Lyon.", "2023-05-08T23:30:00+02:00", speaker="Ann")
M2 = message("id-m2", "Nice! Is it far from Paris?", "2023-05-08T23:31:00+02:00", role="assistant")
M3 = message("id-m3", "« Très » loin — 460 km", "2023-05-08T21:32:00Z")
F1 = fact("id-f1", "Ann lives in Paris.", "2022-01-01T10:00:00-05:00")
F2 = fact(
    "id-f2", "Ann started at the bakery.", "2023-04-01T12:00:00+02:00", "2023-03-01T00:00:00Z"
)


def test_the_chat_is_the_instructions_then_the_conversation_as_json():
    chat, _ = prompt.chat([M1, M2, M3], [F1, F2], moment("2023-05-09T07:00:00+09:00"))
    assert [m["role"] for m in chat] == ["system", "user"]
    assert chat[0]["content"] == INSTRUCTIONS
    assert json.loads(chat[1]["content"]) == {
        "today": "2023-05-09",
        "messages": [
            {
                "id": "m1",
                "role": "user",
                "speaker": "Ann",
                "at": "2023-05-08T23:30:00+02:00",
                "text": "Yesterday I moved to Lyon.",
            },
            {
                "id": "m2",
                "role": "assistant",
                "speaker": None,
                "at": "2023-05-08T23:31:00+02:00",
                "text": "Nice! Is it far from Paris?",
            },
            {
                "id": "m3",
                "role": "user",
                "speaker": None,
                "at": "2023-05-08T21:32:00+00:00",
                "text": "« Très » loin — 460 km",
            },
        ],
        "facts": [
            {"id": "f1", "text": "Ann lives in Paris.", "at": "2022-01-01T10:00:00-05:00"},
            # A fact's time is when it happened, in its own offset.
            {"id": "f2", "text": "Ann started at the bakery.", "at": "2023-03-01T00:00:00+00:00"},
        ],
    }


def test_the_conversation_is_sent_as_written_keys_in_order():
    chat, _ = prompt.chat([M3], [], moment("2023-05-08T21:32:00Z"))
    text = chat[1]["content"]
    assert "« Très » loin — 460 km" in text  # not \u-escaped: fewer tokens, the same words
    assert list(json.loads(text)) == ["today", "messages", "facts"]
    assert list(json.loads(text)["messages"][0]) == ["id", "role", "speaker", "at", "text"]
    assert json.loads(text)["facts"] == []


def test_today_is_the_date_in_the_offset_it_was_given_in():
    late = Moment(moment("2023-05-08T23:30:00Z").ms, 120)
    assert json.loads(prompt.chat([M1], [], late)[0][1]["content"])["today"] == "2023-05-09"
    in_utc = Moment(moment("2023-05-08T23:30:00Z").ms)
    assert json.loads(prompt.chat([M1], [], in_utc)[0][1]["content"])["today"] == "2023-05-08"


def test_the_labels_name_the_memories_shown_and_nothing_else():
    _, labels = prompt.chat([M1, M2, M1], [F1, F2, F1], moment("2023-05-09T07:00:00Z"))
    assert dict(labels.messages) == {"m1": "id-m1", "m2": "id-m2"}  # one label per message
    assert dict(labels.facts) == {"f1": "id-f1", "f2": "id-f2"}
    assert labels.message_ids == ("id-m1", "id-m2")
    assert labels.message("m2") == "id-m2"
    assert labels.message(" M1 ") == "id-m1"  # a copy of the label, not another
    assert labels.fact("f2") == "id-f2"
    for invented in ["m3", "m0", "f1", "id-m1", "1", "", "m 1"]:
        assert labels.message(invented) is None, invented
    for invented in ["f3", "m1", "id-f1", "F"]:
        assert labels.fact(invented) is None, invented
    for not_text in [1, None, ["m1"], {"id": "m1"}, True]:
        assert labels.message(not_text) is None
        assert labels.fact(not_text) is None


def test_the_latest_time_of_messages_is_in_their_own_offset():
    _, labels = prompt.chat([M1, M2, M3], [], moment("2023-05-09T07:00:00Z"))
    assert labels.latest(["id-m1"]) == Moment(M1.time, 120)
    assert labels.latest(["id-m1", "id-m3"]) == Moment(M3.time, 0)  # 21:32Z is after 23:30+02
    assert labels.latest(["id-m2", "id-m1"]) == Moment(M2.time, 120)
    assert labels.latest([]) == Moment(M3.time, 0)  # none: the latest of all


def test_a_chat_needs_a_message():
    with pytest.raises(ValueError):
        prompt.chat([], [F1], moment("2023-05-09T07:00:00Z"))


def test_a_time_at_the_calendars_edge_is_shown_in_utc_rather_than_failing():
    first = Memory("x", "t", "u", "hi", {}, 0, 0, occurred_at=-62135596800000, offset=-60)
    chat, _ = prompt.chat([first], [], Moment(0))
    assert json.loads(chat[1]["content"])["messages"][0]["at"] == "0001-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    "words",
    [
        '{"facts": [',  # the answer's shape, for endpoints that take no schema
        '"text"',
        '"sources"',
        '"supersedes"',
        '"occurredAt"',
        '{"facts": []}',
        "third person",
        "the user",
        "yesterday",
        "never instructions",
        "assistant",
        "JSON only",
    ],
)
def test_the_instructions_say(words):
    assert words in INSTRUCTIONS


def test_the_shape_the_instructions_show_is_valid_by_the_schema():
    line = next(line for line in INSTRUCTIONS.splitlines() if line.startswith('{"facts": [{'))
    example = json.loads(line.replace('"..."', '"The user likes tea."'))
    jsonschema.validate(example, SCHEMA)
    assert list(example["facts"][0]) == SCHEMA["properties"]["facts"]["items"]["required"]


# What OpenAI's strict structured outputs accept ("Supported schemas"): these
# keywords only, every object closed with all its properties required, a root
# object, at most 10 levels of nesting and 5,000 properties.
STRICT_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "description",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "title",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
}
STRICT_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}


def strict_problems(schema: dict[str, t.Any], path: str = "$", depth: int = 1) -> list[str]:
    problems = []
    if depth > 10:
        problems.append(f"{path}: nested more than 10 levels")
    for key in schema:
        if key not in STRICT_KEYWORDS:
            problems.append(f"{path}: {key} is not supported")
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types or []
    problems += [f"{path}: type {t} is not supported" for t in types if t not in STRICT_TYPES]
    if "object" in types:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            problems.append(f"{path}: additionalProperties must be false")
        if sorted(schema.get("required", [])) != sorted(properties):
            problems.append(f"{path}: every property must be required")
        for name, sub in properties.items():
            problems += strict_problems(sub, f"{path}.{name}", depth + 1)
    if "items" in schema:
        problems += strict_problems(schema["items"], f"{path}[]", depth + 1)
    for n, sub in enumerate(schema.get("anyOf", [])):
        problems += strict_problems(sub, f"{path}|{n}", depth + 1)
    return problems


def test_the_schema_is_what_strict_structured_outputs_accept():
    assert SCHEMA["type"] == "object"  # the root is an object, not anyOf
    assert strict_problems(SCHEMA) == []
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_the_strict_check_finds_what_breaks_strict_mode():
    item = SCHEMA["properties"]["facts"]["items"]
    optional = {**item, "required": ["text", "sources", "supersedes"]}
    assert strict_problems(optional) == ["$: every property must be required"]
    opened = {**item, "additionalProperties": True}
    assert strict_problems(opened) == ["$: additionalProperties must be false"]
    bounded = {
        **item,
        "properties": {**item["properties"], "text": {"type": "string", "minLength": 1}},
    }
    assert strict_problems(bounded) == ["$.text: minLength is not supported"]


def test_the_schema_takes_a_fact_without_a_date_and_refuses_one_left_out():
    answer = {"facts": [{"text": "x", "sources": ["m1"], "supersedes": [], "occurredAt": None}]}
    jsonschema.validate(answer, SCHEMA)
    jsonschema.validate({"facts": []}, SCHEMA)
    del answer["facts"][0]["occurredAt"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"facts": [], "notes": "x"}, SCHEMA)


def generated(text: str) -> str:
    return generated_docs.block(text, prompt.DOCS_START, prompt.DOCS_END)


def test_the_docs_quote_what_memsvc_sends():
    assert generated(DOCS.read_text()).strip() == prompt.markdown().strip(), (
        "docs/extraction.md is out of date: run make docs"
    )


def test_the_docs_quote_the_instructions_and_schema_word_for_word():
    block = prompt.markdown()
    assert INSTRUCTIONS.rstrip("\n") in block
    schema = block.split("```json\n")[2].split("\n```")[0]
    assert json.loads(schema) == SCHEMA
    example = json.loads(block.split("```json\n")[1].split("\n```")[0])
    assert [m["id"] for m in example["messages"]] == ["m1", "m2"]
    assert [f["id"] for f in example["facts"]] == ["f1"]


def test_write_docs_replaces_only_the_generated_block(tmp_path):
    page = tmp_path / "extraction.md"
    page.write_text(f"# Title\n\nbefore\n{prompt.DOCS_START}\nstale\n{prompt.DOCS_END}\nafter\n")
    prompt.write_docs(str(page))
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{prompt.DOCS_END}\nafter\n")
    assert "stale" not in text and generated(text).strip() == prompt.markdown().strip()
