"""Metadata filters: what ``filter`` on ``memory.search`` and ``memory.getAll`` means.

A filter is an object whose keys are metadata keys (``a.b`` reaches into
nested objects) and whose values are either a JSON value (equality) or an
object with exactly one operator: ``eq``, ``ne``, ``in``, ``nin``, ``gt``,
``gte``, ``lt``, ``lte``, ``exists``, ``contains``. Conditions are ANDed.

One meaning (:mod:`.matching`), two evaluations: :meth:`Filter.matches`
tests one memory's metadata (listing, the uncached search path);
:mod:`.columns` tests every memory of a cached user at once, from columns
built once per user and key. A property test holds the two to the same
answers.

What one filter may cost is bounded, and paid for by the call that asks:

* its size: at most :data:`MAX_CONDITIONS` conditions, :data:`MAX_FILTER_BYTES`
  of JSON, and no deeper than metadata may be;
* per memory: a condition walks its key's path and compares the value found
  there with its operand by walking the operand (:func:`same`), so no
  condition costs more than its own size, however large the value it meets
  (a whole value was once serialized per condition: 0.18 s of CPU per
  memory with 60 KB of nested metadata);
* per call: the metadata texts parsed to evaluate it are charged to the
  call's :class:`MetadataBudget`, and past it the call is refused.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import sys
import typing as t

from ..errors import BadRequest
from .matching import Condition
from .matching import Members
from .matching import Operand
from .matching import lookup
from .matching import test

OPERATORS = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "exists", "contains")

#: A filter holds at most this many conditions (metadata keys).
MAX_CONDITIONS = 32
#: ... and at most this many bytes as compact JSON.
MAX_FILTER_BYTES = 16_384
#: The largest magnitude a number may have to be compared (a double's).
MAX_NUMBER = sys.float_info.max
#: Metadata (bytes of JSON text) one call's filter may examine when no other bound is given:
#: as much as one answer may carry (``MEMSVC_MAX_RESPONSE_BYTES``' default).
DEFAULT_SCAN_BYTES = 32 * 2**20


class InvalidFilter(ValueError):
    """The filter is not well formed.

    ``messages`` maps the offending metadata key (``category``, or
    ``category.in`` for an operator's value) to what is wrong, or is one
    message about the filter as a whole.
    """

    def __init__(self, message: str, key: str | None = None):
        super().__init__(f"{key}: {message}" if key else message)
        self.messages: str | dict[str, str] = {key: message} if key else message


class MetadataBudget:
    """What one call may examine of metadata to evaluate its filter: bytes of JSON text parsed.

    Each text is charged as it is parsed; past ``max_bytes`` the call is
    refused (400) with what was reached. Parsing is a filter's one cost
    that grows with the data (about 5 to 70 ns per byte, by the shape of
    the JSON): the budget bounds it per call.
    """

    __slots__ = ("max_bytes", "used")

    def __init__(self, max_bytes: int | None = DEFAULT_SCAN_BYTES):
        self.max_bytes = max_bytes
        self.used = 0

    def charge(self, nbytes: int) -> None:
        self.used += nbytes
        if self.max_bytes is not None and self.used > self.max_bytes:
            raise BadRequest(
                f"Invalid input: filter: evaluating it would read more than {self.max_bytes:,} "
                "bytes of this user's metadata, the most one call may read "
                "(MEMSVC_MAX_FILTER_SCAN_BYTES); list fewer memories at a time "
                "(createdAfter, createdBefore) or filter a smaller user"
            )

    def parse(self, text: str) -> t.Any:
        """A metadata text parsed, and charged."""
        self.charge(len(text))
        return json.loads(text)


def _zoned_time(value: str) -> datetime.datetime | None:
    """An operand timestamp: it must say its zone (``Z`` or ``+02:00``)."""
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@dataclasses.dataclass(frozen=True)
class Filter:
    conditions: tuple[Condition, ...]

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def matches(self, metadata: dict[str, t.Any]) -> bool:
        """Whether one memory's metadata passes every condition."""
        return all(test(c, lookup(metadata, c.path)) for c in self.conditions)

    def parse_if_matches(self, text: str, budget: MetadataBudget) -> dict[str, t.Any] | None:
        """One memory's metadata, parsed (and charged to ``budget``) if it passes; else None."""
        metadata = budget.parse(text) if text != "{}" else {}
        return metadata if self.matches(metadata) else None


def parse(raw: t.Any, *, max_depth: int = 32) -> Filter:
    """A filter from its JSON form, or :class:`InvalidFilter` naming what is wrong.

    ``max_depth``: how deeply metadata may nest (a key path or an operand
    deeper than that could never match anything).
    """
    if not isinstance(raw, dict):
        raise InvalidFilter("must be an object whose keys are metadata keys")
    _check_bounds(raw, max_depth)
    conditions = []
    for key, spec in raw.items():
        if key == "" or "" in key.split("."):
            raise InvalidFilter("a metadata key must not be empty", key)
        path = tuple(key.split("."))
        if len(path) > max_depth:
            raise InvalidFilter(f"a key path must have at most {max_depth} parts", key)
        if not isinstance(spec, dict):
            conditions.append(Condition(path, "eq", Operand.of(spec)))
            continue
        if len(spec) != 1:
            raise InvalidFilter(
                f"an operator object must have exactly one operator, one of "
                f"{', '.join(OPERATORS)} (to match an object, use eq)",
                key,
            )
        [(op, operand)] = spec.items()
        if op not in OPERATORS:
            raise InvalidFilter(f"unknown operator {op!r}; use one of {', '.join(OPERATORS)}", key)
        conditions.append(Condition(path, op, _operand(f"{key}.{op}", op, operand)))
    return Filter(tuple(conditions))


def _check_bounds(raw: dict[str, t.Any], max_depth: int) -> None:
    """What a filter may cost: conditions, depth, text, numbers and size, checked without recursion.

    Runs before anything else reads the filter, so that no message ever
    echoes a key that is not text, and no deep value reaches a recursive
    function.
    """
    if len(raw) > MAX_CONDITIONS:
        raise InvalidFilter(
            f"must have at most {MAX_CONDITIONS} conditions (this one has {len(raw)})"
        )
    # An operand sits under its key and its operator: an operand's outermost
    # array or object is at depth 2 and may nest as deeply as metadata may.
    stack: list[tuple[t.Any, int]] = [(raw, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if abs(node) > MAX_NUMBER:
                raise InvalidFilter("numbers must be within the range of a double (about 1.8e308)")
        elif isinstance(node, (dict, list)):
            if depth > max_depth + 1:
                raise InvalidFilter(f"must not be nested more than {max_depth} levels deep")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key)
                stack.append((item, depth + 1))
    size = len(json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_FILTER_BYTES:
        raise InvalidFilter(f"must be at most {MAX_FILTER_BYTES} bytes as JSON (it is {size})")


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidFilter(
            "keys and strings must be valid Unicode text (one has a lone surrogate)"
        ) from None


def _operand(where: str, op: str, operand: t.Any) -> t.Any:
    if op in ("eq", "ne", "contains"):
        return Operand.of(operand)
    if op in ("in", "nin"):
        if not isinstance(operand, list):
            raise InvalidFilter("must be an array of values", where)
        members = [Operand.of(v) for v in operand]
        return Members(
            frozenset(m.identity for m in members if m.scalar),
            tuple(m for m in members if not m.scalar),
        )
    if op == "exists":
        if not isinstance(operand, bool):
            raise InvalidFilter("must be true or false", where)
        return operand
    # gt, gte, lt, lte
    if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
        raise InvalidFilter("must be a number or an ISO 8601 timestamp", where)
    if isinstance(operand, str):
        when = _zoned_time(operand)
        if when is None:
            raise InvalidFilter(
                f"{operand[:64]!r} is not an ISO 8601 timestamp with a time zone "
                "(e.g. 2026-11-23T10:00:00Z); strings compare only as timestamps",
                where,
            )
        return when
    if not math.isfinite(operand):
        raise InvalidFilter("must be a finite number", where)
    return operand
