"""How a value in metadata passes a filter's condition: typed JSON equality, bounded by the operand.

A :class:`Condition` names a key path, an operator and its operand
(:func:`~.filters.parse` makes them). :func:`test` decides whether the
value found at the path (or :data:`MISSING`) passes. Equality is typed JSON
equality: 1, "1" and true differ, 1 and 1.0 do not; arrays are equal as a
whole, in order, objects in any key order. :func:`same` compares a value
with an operand by walking both together, so no condition costs more than
its operand's size, however large the value it meets. The cached columns
(:mod:`.columns`) answer with the same primitives.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import typing as t

MISSING = object()

# JSON kinds, for typed equality: 1, "1" and true are different values.
ABSENT, NULL, BOOL, NUMBER, STRING, ARRAY, OBJECT = range(7)


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
