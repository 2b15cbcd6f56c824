"""A cached user's metadata, a column per key path: a filter tests every memory at once.

A user's snapshot keeps its memories' metadata texts. The key paths a
filter names become :class:`Column` s, built in one pass over the texts
(each distinct text parsed once, and charged to the call's
:class:`~.filters.MetadataBudget`), and kept for later searches within
:attr:`Columns.budget` bytes, the most recently used first.

A column keeps no parsed values, only what tests need: per memory the
value's kind and, for a scalar, a code standing for it (a table of the
column's distinct scalars); for an array, the codes of its scalar
elements. A test on an array or object operand (rare) parses again the
texts of the memories whose value could match, and compares as
:meth:`~.filters.Filter.matches` does. So what a column holds is what it
counts (:attr:`Column.nbytes`): its arrays and its table, not a copy of
every value (a column once kept each memory's parsed value and counted a
few bytes of it: 60 KB of nested metadata held 1.5 MB each).
"""

from __future__ import annotations

import collections
import datetime
import sys
import threading
import typing as t

import numpy as np

from . import matching
from .filters import Filter
from .filters import MetadataBudget
from .matching import ABSENT
from .matching import ARRAY
from .matching import MISSING
from .matching import NUMBER
from .matching import STRING
from .matching import Condition

#: What a user's columns may keep when no budget is given.
DEFAULT_BUDGET = 32 * 2**20

#: What one entry of a column's table takes besides its value: the dict's slot, the
#: (kind, value) tuple, and the code (an int object past the 256 Python keeps).
_ENTRY_BYTES = 3 * 8 * 3 // 2 + sys.getsizeof((0, 0))


#: Which of some memories (a boolean mask) hold a value satisfying a test, parsed again.
Again = t.Callable[[np.ndarray, t.Callable[[t.Any], bool]], np.ndarray]


def _scalar_bytes(value: t.Any) -> int:
    """What a scalar from a parsed text holds on its own (None, true and false are shared)."""
    return 0 if value is None or isinstance(value, bool) else sys.getsizeof(value)


class Column:
    """One key path's values for every memory of a user, as tests need them."""

    def __init__(self, path: tuple[str, ...], size: int):
        self.path = path
        self.kinds = np.zeros(size, dtype=np.int8)  # ABSENT
        self.codes = np.full(size, -1, dtype=np.int32)  # scalars only
        self.table: dict[tuple[int, t.Any], int] = {}
        self.member_codes = np.zeros(0, dtype=np.int32)  # scalar elements of arrays
        self.member_owner = np.zeros(0, dtype=np.int32)
        #: Memories whose value is an array holding an array or an object.
        self.nested = np.zeros(0, dtype=bool)
        self._table_bytes = 0
        self._numbers: np.ndarray | None = None  # per code
        self._times: np.ndarray | None = None  # per code

    @property
    def size(self) -> int:
        return len(self.kinds)

    @property
    def nbytes(self) -> int:
        """What this column holds: its arrays, and its table of distinct scalars."""
        arrays = (self.kinds, self.codes, self.member_codes, self.member_owner, self.nested,
                  self._numbers, self._times)  # fmt: skip
        return (
            sum(a.nbytes for a in arrays if a is not None)
            + sys.getsizeof(self.table)
            + self._table_bytes
        )

    def _code(self, value: t.Any) -> int:
        key = matching.identity(value)
        code = self.table.get(key)
        if code is None:
            code = self.table[key] = len(self.table)
            self._table_bytes += _ENTRY_BYTES + _scalar_bytes(value) + (28 if code > 256 else 0)
        return code

    def _per_code(
        self, of: t.Callable[[int, t.Any], t.Any], dtype: t.Any, missing: t.Any
    ) -> np.ndarray:
        """``of(kind, value)`` for each code in code order, then ``missing`` (for code -1)."""
        out = np.fromiter((of(k, v) for k, v in self.table), dtype=dtype, count=len(self.table))
        return np.append(out, np.array([missing], dtype=dtype))

    def numbers(self) -> np.ndarray:
        """Each memory's value as a double; NaN where it is not a number."""
        if self._numbers is None:
            self._numbers = self._per_code(
                lambda k, v: matching.as_double(v) if k == NUMBER else np.nan, np.float64, np.nan
            )
        return self._numbers[self.codes]

    def times(self) -> np.ndarray:
        """Each memory's value as a timestamp (epoch s); NaN where it is not one."""
        if self._times is None:

            def stamp(k: int, v: t.Any) -> float:
                when = matching.parse_time(v) if k == STRING else None
                return when.timestamp() if when is not None else np.nan

            self._times = self._per_code(stamp, np.float64, np.nan)
        return self._times[self.codes]

    def test(self, condition: Condition, again: Again) -> np.ndarray:
        """Which memories pass ``condition``.

        ``again(candidates, holds)``: for those memories, whether their values,
        parsed again from their texts, satisfy ``holds`` (for array and
        object operands).
        """
        op, operand = condition.op, condition.operand
        present = self.kinds != ABSENT
        if op == "exists":
            return present if operand else ~present
        if op in ("eq", "ne"):
            if operand.scalar:
                code = self.table.get(operand.identity)
                equal = self.codes == code if code is not None else np.zeros_like(present)
            else:
                equal = again(self.kinds == operand.kind, operand.equals)
            return equal if op == "eq" else ~equal
        if op in ("in", "nin"):
            codes = [self.table[i] for i in operand.scalars if i in self.table]
            inside = np.isin(self.codes, np.array(codes, dtype=np.int32))
            if operand.composites:
                kinds = [m.kind for m in operand.composites]
                inside |= again(np.isin(self.kinds, kinds), operand.holds)
            return inside if op == "in" else ~inside
        if op == "contains":
            if not operand.scalar:
                return again(self.nested, lambda value: matching.contains(value, operand))
            out = np.zeros(self.size, dtype=bool)
            if operand.kind == STRING:
                word = operand.value
                holds = self._per_code(lambda k, v: k == STRING and word in v, bool, False)
                out |= holds[self.codes]
            code = self.table.get(operand.identity)
            if code is not None and len(self.member_codes):
                out[self.member_owner[self.member_codes == code]] = True
            return out
        dated = isinstance(operand, datetime.datetime)
        left = self.times() if dated else self.numbers()
        right = operand.timestamp() if dated else operand
        with np.errstate(invalid="ignore"):  # NaN (no such value) compares false
            return matching.compare(op, left, right)  # type: ignore[arg-type,return-value]


class _Builder:
    """Columns filled one memory at a time (each from its own table of scalars on)."""

    def __init__(self, columns: list[Column]):
        self.columns = columns
        self.codes: list[list[int]] = [[] for _ in columns]  # array elements, and their owners
        self.owners: list[list[int]] = [[] for _ in columns]
        self.spans: list[dict[int, tuple[int, int]]] = [{} for _ in columns]
        self.nested = [np.zeros(c.size, dtype=bool) for c in columns]

    def add(self, i: int, metadata: t.Any) -> None:
        for c, column in enumerate(self.columns):
            value = matching.lookup(metadata, column.path)
            k = matching.kind(value)
            column.kinds[i] = k
            if k < ARRAY and k != ABSENT:
                column.codes[i] = column._code(value)
            elif k == ARRAY:
                codes, start = self.codes[c], len(self.codes[c])
                for item in value:
                    if matching.kind(item) < ARRAY:
                        codes.append(column._code(item))
                    else:
                        self.nested[c][i] = True
                self.owners[c] += [i] * (len(codes) - start)
                self.spans[c][i] = (start, len(codes))

    def copy(self, i: int, j: int) -> None:
        """Memory ``i`` has the same metadata as memory ``j``, added before."""
        for c, column in enumerate(self.columns):
            column.kinds[i] = column.kinds[j]
            column.codes[i] = column.codes[j]
            self.nested[c][i] = self.nested[c][j]
            span = self.spans[c].get(j)
            if span is not None:
                codes = self.codes[c]
                codes += codes[span[0] : span[1]]
                self.owners[c] += [i] * (span[1] - span[0])

    def fill(self, texts: t.Sequence[str], budget: MetadataBudget) -> list[Column]:
        """The columns over these texts: each distinct one parsed once."""
        first: dict[str, int] = {}
        for i, text in enumerate(texts):
            if text == "{}":
                continue  # every path absent, as the columns start
            j = first.setdefault(text, i)
            if j != i:
                self.copy(i, j)
            else:
                self.add(i, budget.parse(text))
        for c, column in enumerate(self.columns):
            column.member_codes = np.array(self.codes[c], dtype=np.int32)
            column.member_owner = np.array(self.owners[c], dtype=np.int32)
            if self.nested[c].any():
                column.nested = self.nested[c]
        return self.columns


def build(
    texts: t.Sequence[str], paths: list[tuple[str, ...]], budget: MetadataBudget
) -> list[Column]:
    """Columns of ``paths`` over these metadata texts: each distinct text parsed once."""
    return _Builder([Column(path, len(texts)) for path in paths]).fill(texts, budget)


def extended(column: Column, texts: t.Sequence[str], budget: MetadataBudget) -> Column:
    """``column`` with these texts' values after its own (``column`` is left as it is: readers
    share it)."""
    part = Column(column.path, len(texts))
    part.table = dict(column.table)
    part._table_bytes = column._table_bytes
    _Builder([part]).fill(texts, budget)
    out = Column(column.path, 0)
    out.kinds = np.concatenate([column.kinds, part.kinds])
    out.codes = np.concatenate([column.codes, part.codes])
    out.member_codes = np.concatenate([column.member_codes, part.member_codes])
    out.member_owner = np.concatenate([column.member_owner, part.member_owner + column.size])
    if len(column.nested) or len(part.nested):
        out.nested = np.zeros(out.size, dtype=bool)
        if len(column.nested):
            out.nested[: column.size] = column.nested
        if len(part.nested):
            out.nested[column.size :] = part.nested
    out.table, out._table_bytes = part.table, part._table_bytes
    return out


class Columns:
    """:class:`Column` per path over a fixed list of metadata JSON texts, built as needed.

    Columns are kept for later searches, the most recently used first,
    within ``budget`` bytes (:attr:`nbytes` says what they take; the search
    cache counts it). The columns a filter needs are built in one pass over
    the texts.
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

    def extended(self, added: t.Sequence[str], whole: list[str] | None = None) -> Columns:
        """Columns over these texts and ``added`` after them, with the same paths built (the
        new texts' values added to each: they are paid for by the writes that added them).

        ``whole``: both as one list, if the caller has it (a snapshot's: one list, not two).
        """
        out = Columns(whole if whole is not None else [*self._texts, *added], self.budget)
        with self._lock:
            kept = list(self._columns.values())
        for column in kept:
            out._columns[column.path] = extended(column, added, MetadataBudget(None))
        return out

    def columns(
        self, paths: t.Sequence[tuple[str, ...]], budget: MetadataBudget | None = None
    ) -> dict[tuple[str, ...], Column]:
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
            built = build(self._texts, missing, budget or MetadataBudget())
            found.update((column.path, column) for column in built)
            self._keep(built)
        return found

    def column(self, path: tuple[str, ...]) -> Column:
        return self.columns([path])[path]

    def mask(self, flt: Filter, budget: MetadataBudget | None = None) -> np.ndarray:
        """Which memories pass ``flt``, as a boolean array."""
        budget = budget or MetadataBudget()
        out = np.ones(self.size, dtype=bool)
        built = self.columns([c.path for c in flt.conditions], budget)
        for condition in flt.conditions:
            path = condition.path

            def again(
                candidates: np.ndarray,
                holds: t.Callable[[t.Any], bool],
                path: tuple[str, ...] = path,
            ) -> np.ndarray:
                return self._again(path, candidates, holds, budget)

            out &= built[path].test(condition, again)
        return out

    def _again(
        self,
        path: tuple[str, ...],
        candidates: np.ndarray,
        holds: t.Callable[[t.Any], bool],
        budget: MetadataBudget,
    ) -> np.ndarray:
        """Which of these memories' values at ``path`` satisfy ``holds``, parsed again."""
        out = np.zeros(self.size, dtype=bool)
        seen: dict[str, bool] = {}
        for i in np.flatnonzero(candidates).tolist():
            text = self._texts[i]
            passed = seen.get(text)
            if passed is None:
                value = matching.lookup(budget.parse(text), path)
                passed = seen[text] = value is not MISSING and holds(value)
            out[i] = passed
        return out

    def _keep(self, built: list[Column]) -> None:
        with self._lock:
            for column in built:
                self._columns[column.path] = column
            total = sum(c.nbytes for c in self._columns.values())
            while self._columns and total > self.budget:
                _, dropped = self._columns.popitem(last=False)
                total -= dropped.nbytes
