"""Metadata filters: what ``filter`` on ``memory.search`` and ``memory.getAll`` means.

A filter is an object whose keys are metadata keys (``a.b`` reaches into
nested objects) and whose values are either a JSON value (equality) or an
object with exactly one operator: ``eq``, ``ne``, ``in``, ``nin``, ``gt``,
``gte``, ``lt``, ``lte``, ``exists``, ``contains``. Conditions are ANDed.

One meaning, two evaluations: :meth:`Filter.matches` tests one memory's
metadata (listing, the uncached search path); :mod:`.columns` tests every
memory of a cached user at once, from columns built once per user and key.
A property test holds the two to the same answers.

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

MISSING = object()

# JSON kinds, for typed equality: 1, "1" and true are different values.
ABSENT, NULL, BOOL, NUMBER, STRING, ARRAY, OBJECT = range(7)


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


def as_double(value: int | float) -> float:
    """A JSON number as a double; NaN for an integer too large for one (nothing compares)."""
    try:
        return float(value)
    except OverflowError:
        return math.nan


def kind(value: t.Any) -> int:
    if value is MISSING:
        return ABSENT
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return ARRAY
    return OBJECT


def _normal(value: t.Any) -> t.Any:
    """A JSON value with integral floats as ints, so that 1 and 1.0 compare equal inside too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def identity(value: t.Any) -> tuple[int, t.Any]:
    """A hashable key equal for exactly the scalar JSON values that are equal (1 and 1.0 too).

    Only for scalars: arrays and objects are compared by :func:`same`.
    """
    k = kind(value)
    if k == NUMBER and isinstance(value, float) and value.is_integer():
        return k, int(value)
    return k, value


def same(value: t.Any, operand: t.Any) -> bool:
    """Whether a metadata value equals an operand (normalised), as JSON values.

    Numbers compare as numbers, arrays as a whole in order, objects as a
    whole in any key order; 1, "1" and true differ. Walks both together
    and stops at the first difference: each step takes a node of the
    operand, so it never costs more than the operand's size, however large
    the value.
    """
    pairs = [(value, operand)]
    while pairs:
        a, b = pairs.pop()
        kb = kind(b)
        if kind(a) != kb:
            return False
        if kb == OBJECT:
            if len(a) != len(b):
                return False
            for key, item in b.items():
                if key not in a:
                    return False
                pairs.append((a[key], item))
        elif kb == ARRAY:
            if len(a) != len(b):
                return False
            pairs.extend(zip(a, b, strict=True))
        elif a != b:  # numbers compare exactly, whichever of int and float they are
            return False
    return True


@dataclasses.dataclass(frozen=True)
class Operand:
    """A JSON value a condition compares with: normalised, with its kind."""

    kind: int
    value: t.Any

    @classmethod
    def of(cls, value: t.Any) -> Operand:
        return cls(kind(value), _normal(value))

    @property
    def scalar(self) -> bool:
        return self.kind < ARRAY

    @property
    def identity(self) -> tuple[int, t.Any]:
        return self.kind, self.value

    def equals(self, value: t.Any) -> bool:
        """Whether ``value`` (present) equals this operand."""
        if self.scalar:
            return kind(value) == self.kind and identity(value) == self.identity
        return same(value, self.value)


@dataclasses.dataclass(frozen=True)
class Members:
    """The operand of ``in`` and ``nin``: scalars by identity, arrays and objects one by one."""

    scalars: frozenset[tuple[int, t.Any]]
    composites: tuple[Operand, ...]

    def holds(self, value: t.Any) -> bool:
        """Whether ``value`` (present) equals one of the members."""
        if kind(value) < ARRAY:
            return identity(value) in self.scalars
        return any(member.equals(value) for member in self.composites)


def parse_time(value: str) -> datetime.datetime | None:
    """An ISO 8601 timestamp as an aware datetime; without a zone it is read as UTC."""
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed


def _zoned_time(value: str) -> datetime.datetime | None:
    """An operand timestamp: it must say its zone (``Z`` or ``+02:00``)."""
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@dataclasses.dataclass(frozen=True)
class Condition:
    path: tuple[str, ...]
    op: str
    #: eq, ne, contains: an :class:`Operand`; in, nin: :class:`Members`; exists: a bool;
    #: gt, gte, lt, lte: a number or an aware datetime.
    operand: t.Any

    @property
    def key(self) -> str:
        return ".".join(self.path)


def lookup(metadata: t.Any, path: tuple[str, ...]) -> t.Any:
    """The value at ``path`` in a metadata object, or :data:`MISSING`."""
    value = metadata
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def compare(op: str, left: float, right: float) -> bool:
    if op == "gt":
        return left > right
    if op == "gte":
        return left >= right
    if op == "lt":
        return left < right
    return left <= right


def _compare(op: str, value: t.Any, operand: t.Any) -> bool:
    """gt/gte/lt/lte: numbers with numbers, timestamps with timestamps; else no match."""
    if isinstance(operand, datetime.datetime):
        if not isinstance(value, str):
            return False
        when = parse_time(value)
        if when is None:
            return False
        return compare(op, when.timestamp(), operand.timestamp())
    if kind(value) != NUMBER:
        return False
    # As doubles, as the cached columns compare them.
    return compare(op, as_double(value), float(operand))


def contains(value: t.Any, operand: Operand) -> bool:
    """A string holding the operand as a substring, or an array holding it as an element."""
    if isinstance(value, str):
        return operand.kind == STRING and operand.value in value
    if isinstance(value, list):
        return any(operand.equals(item) for item in value)
    return False


def test(condition: Condition, value: t.Any) -> bool:
    """Whether the value at a condition's path (or :data:`MISSING`) passes it."""
    op, operand = condition.op, condition.operand
    if op == "exists":
        return (value is not MISSING) is operand
    if op in ("eq", "ne"):
        equal = value is not MISSING and operand.equals(value)
        return equal if op == "eq" else not equal
    if op in ("in", "nin"):
        inside = value is not MISSING and operand.holds(value)
        return inside if op == "in" else not inside
    if op == "contains":
        return contains(value, operand)
    return value is not MISSING and _compare(op, value, operand)


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
