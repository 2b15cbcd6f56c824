"""The API's rules for input values, as plain functions with their limits passed in.

The marshmallow schemas of :mod:`memsvc.api.inputs` apply them to calls,
with the limits of the app's settings; ``memsvc import`` applies them to
every line of a file, with the same settings. Text rules are in
:mod:`memsvc.text`.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import sys
import typing as t

from . import clock
from .models import Moment
from .text import InvalidText
from .text import check_text
from .text import check_unicode

#: The largest magnitude a metadata number may have: a double's.
MAX_DOUBLE = sys.float_info.max

_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


class Invalid(ValueError):
    """The value breaks a rule; the message says which, e.g. "must be a UUID"."""


def _reject_constant(name: str) -> t.NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # 1e999 is valid JSON syntax but no double: Python would read it as
    # infinity, which JSON cannot carry back out.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def strict_json(text: str) -> t.Any:
    """Parse JSON, refusing NaN, Infinity and numbers no double holds.

    :raises json.JSONDecodeError: malformed JSON.
    :raises ValueError: NaN, Infinity, or an integer with too many digits.
    :raises RecursionError: nested too deeply to parse.
    """
    if text.startswith("\ufeff"):  # as json.loads says it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


# One decoder for every input, one encoder for every size: json.loads and
# json.dumps with options build a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def text(value: t.Any, max_chars: int, *, printable: bool = False) -> str:
    """A string by :func:`memsvc.text.check_text`."""
    if not isinstance(value, str):
        raise Invalid("must be a string")
    try:
        check_text(value, max_chars, printable=printable)
    except InvalidText as e:
        raise Invalid(str(e)) from None
    return value


def whole_number(value: t.Any, low: int, high: int) -> int:
    """An integer from ``low`` to ``high``; ``true`` and ``"10"`` are none."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise Invalid(f"must be a whole number from {low} to {high}")
    return value


def uuid(value: str) -> str:
    """A UUID in its usual 8-4-4-4-12 form, returned lower-case."""
    if not _UUID.fullmatch(value):
        raise Invalid("must be a UUID")
    return value.lower()


def timestamp(value: t.Any, *, future: bool = False) -> int:
    """An ISO 8601 timestamp with its zone (``Z`` or ``+02:00``), as epoch milliseconds."""
    if not isinstance(value, str):
        raise Invalid("must be an ISO 8601 timestamp string")
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise Invalid("must be an ISO 8601 timestamp such as 2026-11-23T10:00:00Z") from None
    if parsed.tzinfo is None:
        raise Invalid("must say its time zone (Z or an offset such as +02:00)")
    try:
        # Answers show times in UTC as toISOString does, which has no
        # form for a year past 9999 (or before 1) that ISO 8601 readers take.
        parsed.astimezone(datetime.UTC)
    except OverflowError:
        raise Invalid("must be within the years 0001 to 9999 in UTC") from None
    ms = int(parsed.timestamp() * 1000)
    if future and ms <= clock.now_ms():
        raise Invalid("must be in the future")
    return ms


def moment(value: t.Any) -> Moment:
    """:func:`timestamp`, with the UTC offset (whole minutes) it was written in."""
    ms = timestamp(value)
    offset = datetime.datetime.fromisoformat(value).utcoffset()
    assert offset is not None
    return Moment(ms, int(offset.total_seconds() // 60))


def metadata(value: t.Any, max_depth: int, max_bytes: int) -> dict[str, t.Any]:
    """A JSON object, at most ``max_depth`` levels deep and ``max_bytes`` as compact JSON."""
    if not isinstance(value, dict):
        raise Invalid("must be a JSON object")
    _check_tree(value, max_depth)
    size = len(_COMPACT.encode(value).encode())
    if size > max_bytes:
        raise Invalid(f"must be at most {max_bytes} bytes as JSON (it is {size})")
    return value


def _check_unicode(value: str) -> None:
    try:
        check_unicode(value)
    except InvalidText as e:
        raise Invalid(str(e)) from None


def _check_tree(value: t.Any, max_depth: int) -> None:
    """Check nesting depth and text in a JSON value without recursing."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_unicode(node)
            continue
        if isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_DOUBLE:
            # Filters compare numbers as doubles: one beyond their range never could be.
            raise Invalid("numbers must be within the range of a double (about 1.8e308)")
        if not isinstance(node, (dict, list)):
            continue
        if depth > max_depth:
            raise Invalid(f"must not be nested more than {max_depth} levels deep")
        if isinstance(node, dict):
            for key, item in node.items():
                _check_unicode(key)
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node)
