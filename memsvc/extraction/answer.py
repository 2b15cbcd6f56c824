"""The model's answer, read as untrusted input: the facts it proposes, and what was dropped.

An answer can only point at what its job showed the model: a source is one
of the job's messages, a superseded fact one of the facts in the prompt
(:class:`~memsvc.extraction.prompt.Labels`); anything else it names (another
user's memory id, a label it made up) is dropped. An answer that is not the
JSON asked for is refused as a whole (:class:`InvalidAnswer`: the job tries
again); a fact that breaks a rule is dropped alone, with a note saying why.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import typing as t

from ..models import Moment
from ..rules import strict_json
from ..text import InvalidText
from ..text import check_text
from ..text import shown
from .prompt import Labels


@dataclasses.dataclass(frozen=True)
class Proposed:
    """A fact the model proposes, its references resolved to memory ids."""

    text: str
    #: Memory ids of the job's messages it was drawn from (deduplicated, in the model's order).
    sources: tuple[str, ...]
    #: Memory ids of the facts shown in the prompt that it replaces.
    supersedes: tuple[str, ...]
    #: When it happened; None: the time of its latest source.
    occurred_at: Moment | None


class InvalidAnswer(ValueError):
    """The answer as a whole is unusable; the message says why (quoting at most 100 characters)."""


#: The most characters of an answer an error or a note quotes.
_QUOTED = 100
#: The most characters of one value a note quotes.
_QUOTED_VALUE = 40

# One fence around the whole answer, as local models often write it.
_FENCE = re.compile(r"\A```[A-Za-z]*\s*(.*?)\s*```\Z", re.DOTALL)
_SPACES = re.compile(r"\s+")


def same_text(a: str, b: str) -> bool:
    """Whether two facts say the same: equal but for case and spaces."""
    return _key(a) == _key(b)


def _key(text: str) -> str:
    return _SPACES.sub(" ", text.strip()).casefold()


def read(
    content: str, labels: Labels, *, max_chars: int, max_facts: int = 50
) -> tuple[list[Proposed], list[str]]:
    """The facts ``content`` proposes, and a short note for each thing dropped from it.

    ``max_chars``: the longest text a fact may have (as a memory's content).

    :raises InvalidAnswer: not JSON, not ``{"facts": [...]}`` with objects in
        it, or more than ``max_facts`` facts.
    """
    facts = _facts(content, max_facts)
    notes: list[str] = []
    out: dict[str, Proposed] = {}
    for n, fact in enumerate(facts, 1):
        proposed = _proposed(fact, labels, max_chars, _Notes(notes, f"fact {n}"))
        if proposed is None:
            continue
        key = _key(proposed.text)
        earlier = out.get(key)
        if earlier is None:
            out[key] = proposed
            continue
        notes.append(f"fact {n}: the same as an earlier fact; merged into it")
        out[key] = dataclasses.replace(
            earlier,
            sources=_unique(earlier.sources + proposed.sources),
            supersedes=_unique(earlier.supersedes + proposed.supersedes),
            occurred_at=earlier.occurred_at or proposed.occurred_at,
        )
    return list(out.values()), notes


def _facts(content: str, max_facts: int) -> list[dict[str, t.Any]]:
    if not isinstance(content, str):
        raise InvalidAnswer("the answer has no text")
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        parsed = strict_json(text)
    except (ValueError, RecursionError):
        raise InvalidAnswer(f"the answer is not JSON: {_quote(content, _QUOTED)}") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("facts"), list):
        raise InvalidAnswer(
            f'the answer is not an object with a "facts" array: {_quote(text, _QUOTED)}'
        )
    facts = parsed["facts"]
    if len(facts) > max_facts:
        raise InvalidAnswer(f"the answer has {len(facts)} facts, more than {max_facts}")
    for n, fact in enumerate(facts, 1):
        if not isinstance(fact, dict):
            raise InvalidAnswer(
                f"fact {n} of the answer is not an object: {_quote(_json(fact), _QUOTED)}"
            )
    return facts


@dataclasses.dataclass
class _Notes:
    notes: list[str]
    prefix: str

    def add(self, note: str) -> None:
        self.notes.append(f"{self.prefix}: {note}")


def _proposed(
    fact: dict[str, t.Any], labels: Labels, max_chars: int, notes: _Notes
) -> Proposed | None:
    text = fact.get("text")
    if not isinstance(text, str):
        notes.add('dropped: no "text"' if text is None else 'dropped: "text" is not a string')
        return None
    text = text.strip()
    try:
        check_text(text, max_chars)
    except InvalidText as e:
        notes.add(f'dropped: "text" {e}')
        return None
    sources = _sources(fact.get("sources"), labels, notes)
    return Proposed(
        text=text,
        sources=sources,
        supersedes=_supersedes(fact.get("supersedes"), labels, notes),
        occurred_at=_occurred_at(fact.get("occurredAt"), labels.latest(sources), notes),
    )


def _sources(given: t.Any, labels: Labels, notes: _Notes) -> tuple[str, ...]:
    given = given if isinstance(given, list) else []
    found = _unique(m for m in map(labels.message, given) if m is not None)
    unknown = [g for g in given if labels.message(g) is None]
    if unknown:
        notes.add(f"sources not among the job's messages dropped: {_values(unknown)}")
    if not found:
        notes.add("no source among the job's messages: all of them taken")
        return labels.message_ids
    return found


def _supersedes(given: t.Any, labels: Labels, notes: _Notes) -> tuple[str, ...]:
    if given is None:
        return ()
    if not isinstance(given, list):
        notes.add('"supersedes" is not an array: ignored')
        return ()
    unknown = [g for g in given if labels.fact(g) is None]
    if unknown:
        notes.add(f"supersedes facts not in the prompt dropped: {_values(unknown)}")
    return _unique(f for f in map(labels.fact, given) if f is not None)


def _occurred_at(given: t.Any, source: Moment, notes: _Notes) -> Moment | None:
    """``given`` as a time: a date is the start of that day in ``source``'s offset, and so is a
    time without a zone; a time with one is taken as it is."""
    if given is None:
        return None
    moment = _moment(given, source) if isinstance(given, str) else None
    if moment is None:
        notes.add(f'"occurredAt" is no ISO date or time in years 0001-9999: {_values([given])}')
    return moment


def _moment(given: str, source: Moment) -> Moment | None:
    try:
        parsed = dt.datetime.fromisoformat(given.strip())
    except ValueError:
        return None
    offset = parsed.utcoffset()
    if offset is None:  # a date, or a time without a zone: where its source was said
        parsed = parsed.replace(tzinfo=dt.timezone(dt.timedelta(minutes=source.offset or 0)))
        minutes = source.offset
    else:  # kept as the API keeps an occurredAt's: its dates are reckoned in it
        minutes = int(offset.total_seconds() // 60)
    try:
        # As memsvc's timestamps (memsvc.rules.timestamp): the years 0001 to 9999 in UTC.
        parsed.astimezone(dt.UTC)
    except OverflowError:
        return None
    return Moment(int(parsed.timestamp() * 1000), minutes)


def _unique(items: t.Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _values(values: t.Sequence[t.Any]) -> str:
    """Up to five values as a note quotes them: JSON, each cut short, controls escaped."""
    quoted = ", ".join(_quote(_json(v), _QUOTED_VALUE) for v in values[:5])
    return quoted + (f" and {len(values) - 5} more" if len(values) > 5 else "")


def _json(value: t.Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):  # nested too deeply to write back
        return f"(a JSON {type(value).__name__})"


def _quote(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters (marked with "..."), safe for a log line."""
    cut = text if len(text) <= most else text[: most - 3] + "..."
    return shown(cut.encode("utf-8", "backslashreplace").decode("utf-8"))
