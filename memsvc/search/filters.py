"""Metadata filters: what ``filter`` on ``memory.search`` and ``memory.getAll`` means.

A filter is an object whose keys are metadata keys (``a.b`` reaches into
nested objects) and whose values are either a JSON value (equality) or an
object with exactly one operator: ``eq``, ``ne``, ``in``, ``nin``, ``gt``,
``gte``, ``lt``, ``lte``, ``exists``, ``contains``. Conditions are ANDed.

One meaning, two evaluations: :meth:`Filter.matches` tests one memory's
metadata (listing, the uncached search path); :meth:`Filter.mask` tests
every memory of a cached user at once, from columns built once per user and
key. A property test holds the two to the same answers.

What one filter may cost is bounded: at most :data:`MAX_CONDITIONS`
conditions, :data:`MAX_FILTER_BYTES` of JSON, and no deeper than metadata
may be; a user's columns are counted in the search cache's memory and kept
within :attr:`Columns.budget`.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import math
import sys
import threading
import typing as t

import numpy as np

OPERATORS = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "exists", "contains")

#: A filter holds at most this many conditions (metadata keys).
MAX_CONDITIONS = 32
#: ... and at most this many bytes as compact JSON.
MAX_FILTER_BYTES = 16_384
#: The largest magnitude a number may have to be compared (a double's).
MAX_NUMBER = sys.float_info.max

_MISSING = object()

# JSON kinds, for typed equality: 1, "1" and true are different values.
_ABSENT, _NULL, _BOOL, _NUMBER, _STRING, _ARRAY, _OBJECT = range(7)


class InvalidFilter(ValueError):
    """The filter is not well formed.

    ``messages`` maps the offending metadata key (``category``, or
    ``category.in`` for an operator's value) to what is wrong, or is one
    message about the filter as a whole.
    """

    def __init__(self, message: str, key: str | None = None):
        super().__init__(f"{key}: {message}" if key else message)
        self.messages: str | dict[str, str] = {key: message} if key else message


def as_double(value: int | float) -> float:
    """A JSON number as a double; NaN for an integer too large for one (nothing compares)."""
    try:
        return float(value)
    except OverflowError:
        return math.nan


def kind(value: t.Any) -> int:
    if value is _MISSING:
        return _ABSENT
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, (int, float)):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    if isinstance(value, list):
        return _ARRAY
    return _OBJECT


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
    """A hashable key equal for exactly the JSON values that are equal.

    Numbers compare as numbers (1 equals 1.0); arrays as a whole, in order;
    objects as a whole, whatever their key order.
    """
    k = kind(value)
    if k in (_ARRAY, _OBJECT):
        return k, json.dumps(_normal(value), sort_keys=True, separators=(",", ":"))
    if k == _NUMBER and isinstance(value, float) and value.is_integer():
        return k, int(value)
    return k, value


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
    operand: t.Any

    @property
    def key(self) -> str:
        return ".".join(self.path)


def lookup(metadata: t.Any, path: tuple[str, ...]) -> t.Any:
    """The value at ``path`` in a metadata object, or a marker for absent."""
    value = metadata
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _compare(op: str, value: t.Any, operand: t.Any) -> bool:
    """gt/gte/lt/lte: numbers with numbers, timestamps with timestamps; else no match."""
    if isinstance(operand, datetime.datetime):
        if not isinstance(value, str):
            return False
        when = parse_time(value)
        if when is None:
            return False
        left, right = when.timestamp(), operand.timestamp()
    else:
        if kind(value) != _NUMBER:
            return False
        # As doubles, as the cached columns compare them.
        left, right = as_double(value), float(operand)
    if op == "gt":
        return left > right
    if op == "gte":
        return left >= right
    if op == "lt":
        return left < right
    return left <= right


def _test(condition: Condition, value: t.Any) -> bool:
    op, operand = condition.op, condition.operand
    if op == "exists":
        return (value is not _MISSING) is operand
    if op in ("eq", "ne"):
        equal = value is not _MISSING and identity(value) == operand
        return equal if op == "eq" else not equal
    if op in ("in", "nin"):
        inside = value is not _MISSING and identity(value) in operand
        return inside if op == "in" else not inside
    if op == "contains":
        if isinstance(value, str) and isinstance(operand[1], str):
            return operand[1] in value
        if isinstance(value, list):
            return any(identity(item) == operand for item in value)
        return False
    return value is not _MISSING and _compare(op, value, operand)


@dataclasses.dataclass(frozen=True)
class Filter:
    conditions: tuple[Condition, ...]

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def matches(self, metadata: dict[str, t.Any]) -> bool:
        """Whether one memory's metadata passes every condition."""
        return all(_test(c, lookup(metadata, c.path)) for c in self.conditions)

    def mask(self, columns: Columns) -> np.ndarray:
        """Which memories of a cached user pass, as a boolean array."""
        out = np.ones(columns.size, dtype=bool)
        built = columns.columns([c.path for c in self.conditions])
        for condition in self.conditions:
            out &= built[condition.path].test(condition)
        return out


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
            conditions.append(Condition(path, "eq", identity(spec)))
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
    if op in ("eq", "ne"):
        return identity(operand)
    if op in ("in", "nin"):
        if not isinstance(operand, list):
            raise InvalidFilter("must be an array of values", where)
        return frozenset(identity(v) for v in operand)
    if op == "exists":
        if not isinstance(operand, bool):
            raise InvalidFilter("must be true or false", where)
        return operand
    if op == "contains":
        return identity(operand)
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


# -- columns: one metadata key of every memory of a cached user ---------------------------


class Column:
    """The values at one metadata path for every memory of a user, ready for testing."""

    def __init__(self, values: list[t.Any]):
        self.values = values
        size = len(values)
        self.kinds = np.fromiter((kind(v) for v in values), dtype=np.int8, count=size)
        codes: dict[tuple[int, t.Any], int] = {}
        self.codes = np.fromiter(
            (
                codes.setdefault(identity(v), len(codes)) if v is not _MISSING else -1
                for v in values
            ),
            dtype=np.int64,
            count=size,
        )
        self._code_of = codes
        self._numbers: np.ndarray | None = None
        self._times: np.ndarray | None = None
        self._value_bytes = _value_bytes(values)

    @property
    def nbytes(self) -> int:
        """About what this column keeps in memory."""
        derived = sum(a.nbytes for a in (self._numbers, self._times) if a is not None)
        return (
            8 * len(self.values)  # the list's pointers
            + self._value_bytes
            + self.kinds.nbytes
            + self.codes.nbytes
            + 150 * len(self._code_of)
            + derived
        )

    def extended(self, values: list[t.Any]) -> Column:
        """This column with ``values`` after it; this one is left as it is (readers share it)."""
        out = Column.__new__(Column)
        out.values = self.values + values
        code_of = dict(self._code_of)
        out.kinds = np.concatenate(
            [self.kinds, np.fromiter((kind(v) for v in values), dtype=np.int8, count=len(values))]
        )
        new_codes = np.fromiter(
            (
                code_of.setdefault(identity(v), len(code_of)) if v is not _MISSING else -1
                for v in values
            ),
            dtype=np.int64,
            count=len(values),
        )
        out.codes = np.concatenate([self.codes, new_codes])
        out._code_of = code_of
        out._numbers = out._times = None
        out._value_bytes = self._value_bytes + _value_bytes(values)
        return out

    def _codes(self, identities: t.Iterable[tuple[int, t.Any]]) -> np.ndarray:
        return np.array(
            [self._code_of[i] for i in identities if i in self._code_of], dtype=np.int64
        )

    def numbers(self) -> np.ndarray:
        if self._numbers is None:
            self._numbers = np.array(
                [as_double(v) if kind(v) == _NUMBER else np.nan for v in self.values],
                dtype=np.float64,
            )
        return self._numbers

    def times(self) -> np.ndarray:
        if self._times is None:
            stamps = []
            for v in self.values:
                when = parse_time(v) if isinstance(v, str) else None
                stamps.append(when.timestamp() if when is not None else np.nan)
            self._times = np.array(stamps, dtype=np.float64)
        return self._times

    def test(self, condition: Condition) -> np.ndarray:
        op, operand = condition.op, condition.operand
        present = self.kinds != _ABSENT
        if op == "exists":
            return present if operand else ~present
        if op in ("eq", "ne"):
            code = self._code_of.get(operand)
            equal = (self.codes == code) if code is not None else np.zeros_like(present)
            return equal if op == "eq" else ~equal
        if op in ("in", "nin"):
            inside = np.isin(self.codes, self._codes(operand))
            return inside if op == "in" else ~inside
        if op == "contains":
            return np.fromiter(
                (_test(condition, v) for v in self.values), dtype=bool, count=len(self.values)
            )
        left = self.times() if isinstance(operand, datetime.datetime) else self.numbers()
        right = operand.timestamp() if isinstance(operand, datetime.datetime) else operand
        with np.errstate(invalid="ignore"):  # NaN (no such value) compares false
            if op == "gt":
                return left > right
            if op == "gte":
                return left >= right
            if op == "lt":
                return left < right
            return left <= right


def _value_bytes(values: list[t.Any]) -> int:
    return sum(sys.getsizeof(v) for v in values if v is not _MISSING)


#: What a user's columns may keep when no budget is given.
DEFAULT_BUDGET = 32 * 2**20


class Columns:
    """:class:`Column` per path over a fixed list of metadata JSON texts, built as needed.

    Columns are kept for later searches, the most recently used first,
    within ``budget`` bytes (:attr:`nbytes` says what they take; the search
    cache counts it). The columns a filter needs are built in one pass over
    the texts, each parsed once.
    """

    def __init__(self, metadata: t.Sequence[str], budget: int = DEFAULT_BUDGET):
        self.size = len(metadata)
        self.budget = budget
        self._texts = metadata
        self._columns: collections.OrderedDict[tuple[str, ...], Column] = collections.OrderedDict()
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(c.nbytes for c in self._columns.values())

    def paths(self) -> list[tuple[str, ...]]:
        with self._lock:
            return list(self._columns)

    def extended(self, metadata: t.Sequence[str]) -> Columns:
        """Columns over these texts and ``metadata`` after them, reusing what is built."""
        out = Columns([*self._texts, *metadata], self.budget)
        with self._lock:
            kept = list(self._columns.items())
        if kept:
            added = [json.loads(text) for text in metadata]
            for path, column in kept:
                out._columns[path] = column.extended([lookup(m, path) for m in added])
        return out

    def columns(self, paths: t.Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], Column]:
        """The columns of ``paths``; those not kept are built in one pass over the texts."""
        found: dict[tuple[str, ...], Column] = {}
        with self._lock:
            for path in paths:
                column = self._columns.get(path)
                if column is not None:
                    self._columns.move_to_end(path)
                    found[path] = column
        missing = [path for path in dict.fromkeys(paths) if path not in found]
        if missing:
            parsed = [json.loads(text) for text in self._texts]
            built = {path: Column([lookup(m, path) for m in parsed]) for path in missing}
            found.update(built)
            self._keep(built)
        return found

    def column(self, path: tuple[str, ...]) -> Column:
        return self.columns([path])[path]

    def _keep(self, built: dict[tuple[str, ...], Column]) -> None:
        with self._lock:
            self._columns.update(built)
            total = sum(c.nbytes for c in self._columns.values())
            while self._columns and total > self.budget:
                _, dropped = self._columns.popitem(last=False)
                total -= dropped.nbytes
