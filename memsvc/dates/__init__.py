"""Dates in text: the time expressions people write, resolved to calendar dates, without a model.

:func:`find_dates` finds expressions such as "yesterday", "last Friday", "two
weeks ago", "in May 2023", "on 3 March" or "last summer" in a text and
resolves each against a reference time (the memory's time, in its own
offset) to an inclusive interval of calendar dates. :func:`query_interval`
turns the time expressions of a search query into one interval.

The rules (docs/api.md, "Dates in text", lists them for users):

* Days are calendar days of the reference's own offset: "yesterday" is the
  day before the reference's local date.
* Weeks run Monday to Sunday; a weekend is its Saturday and Sunday.
* "last Friday" is the latest Friday before the reference day (1 to 7 days
  before it); "Friday", "on Friday" and "this Friday" the Friday of the
  reference's week; "next Friday" the Friday of the week after.
* "N days/weeks/months/years ago" is the whole day, week, month or year that
  many units back; "the past N days" (or "the last N days") the N days before
  the reference day and the day itself.
* A month or a day of a month named without a year ("in March", "on 3 March")
  is in the reference's year; "last March" is the latest March that ended
  before the reference day, "next March" the first to start after it.
* Seasons are the northern hemisphere's meteorological ones: spring March-May,
  summer June-August, autumn (fall) September-November, winter December to
  February (the winter of 2022-23 starts in December 2022). "last summer" is
  the latest summer that ended before the reference day, "next summer" the
  first to start after it, "this summer" the one of the reference's year
  ("this winter" the one the reference is in, or else the coming one).
* "may" and "march" in lower case are the verbs unless a year follows.

What is not understood is left out, never guessed: vague expressions ("a
while ago", "recently", "a few days ago"), numeric dates whose order is
ambiguous ("07/05/2023"), years without a preposition ("2019 was great"),
times of day, holidays, and anything that does not name a real date
("30 February").

The package is pure (no I/O, no clock). Every expression holds an *anchor* (a
digit, or a word naming a day, a unit of time, a weekday, a month or a
season); one regular expression finds the anchors, and the grammar (one
compiled alternation, ``grammar``) is tried only at the few words before
each; ``resolving`` turns what it matched into dates. Each
position is tried at most once, so the cost grows with the text's length:
about 0.05 ms for a sentence, and under a second for 64 KiB of the densest
text (bench/dates.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import typing as t

from .grammar import ANCHOR
from .grammar import BODY
from .grammar import PATTERN
from .grammar import REACH
from .grammar import WORD_START
from .grammar import WORDS_BEFORE
from .resolving import RESOLVE
from .resolving import Skip

__all__ = ["DateSpan", "find_dates", "query_interval", "split_query"]


@dataclasses.dataclass(frozen=True, slots=True)
class DateSpan:
    """A time expression found in a text, resolved to calendar dates."""

    #: The expression as written (``text[offset:offset + len(text)]`` of the text searched).
    text: str
    #: The first and last calendar dates it covers (inclusive; ``start <= end``).
    start: dt.date
    end: dt.date
    #: Where the expression starts in the text searched (in characters).
    offset: int

    def as_json(self) -> dict[str, str]:
        """``{"text", "start", "end"}``, the dates as ``YYYY-MM-DD``: a memory's ``dates`` entry."""
        return {"text": self.text, "start": self.start.isoformat(), "end": self.end.isoformat()}


def find_dates(text: str, reference: dt.datetime) -> list[DateSpan]:
    """The time expressions of ``text``, in order, resolved against ``reference``.

    ``reference`` is the time the text was written, with its offset: days are
    the calendar days of that offset. Expressions that name no real date are
    left out.
    """
    return _find(text, _today(reference), past=False)


def split_query(text: str, now: dt.datetime) -> tuple[DateSpan | None, str]:
    """A search query's time interval (:func:`query_interval`) and the query without it.

    The rest is the query with each time expression (and a preposition right
    before it) taken out: "what did I cook last weekend?" -> "what did I cook?".
    """
    spans = _find(text, _today(now), past=True)
    if not spans:
        return None, text
    first, last = spans[0], spans[-1]
    end = last.offset + len(last.text)
    interval = DateSpan(
        text=text[first.offset : end],
        start=min(s.start for s in spans),
        end=max(s.end for s in spans),
        offset=first.offset,
    )
    rest, at = [], 0
    for span in spans:
        before = _PREP_BEFORE.sub("", text[at : span.offset])
        rest.append(before)
        at = span.offset + len(span.text)
    rest.append(text[at:])
    cleaned = _SPACES.sub(" ", "".join(rest)).strip()
    return interval, _SPACE_BEFORE_PUNCT.sub(r"\1", cleaned)


def query_interval(text: str, now: dt.datetime) -> DateSpan | None:
    """The interval a search query's time expressions name, or None.

    Resolved against ``now`` as :func:`find_dates` does, except that a month,
    a day of a month or a weekday named alone is the latest one that is not
    in the future ("what happened in March?" asked in January is last year's
    March): a query asks about what was stored. Several expressions give the
    interval that covers them all ("in March or April" is March to April);
    its ``text`` runs from the first expression to the end of the last.
    """
    return split_query(text, now)[0]


_PREP_BEFORE = re.compile(r"\b(?:in|on|during|at|from|since|of|for)\s*$", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([?.!,;:])")


def _today(reference: dt.datetime) -> dt.date:
    if not isinstance(reference, dt.datetime) or reference.utcoffset() is None:
        raise ValueError("the reference time must be a datetime with its offset")
    return reference.date()


def _find(text: str, today: dt.date, *, past: bool) -> list[DateSpan]:
    """Each anchor's expression: the first match at one of the few word starts before it.

    Every start position is tried at most once, and only near an anchor, so a
    text costs its length (to find anchors) plus a few matches per anchor.
    """
    out: list[DateSpan] = []
    tried = 0  # every word start before this has been tried (or lies inside a span)
    match = PATTERN.match
    for anchor in ANCHOR.finditer(text):
        at = anchor.start()
        if at < tried:
            continue
        starts = [w.start() for w in WORD_START.finditer(text, max(tried, at - REACH), at + 1)]
        for start in starts[-WORDS_BEFORE - 1 :]:
            m = match(text, start)
            if m is None:
                continue
            try:
                span = _span(text, m, today, past)
            except Skip:  # none of it is placed, nor any part of it
                tried = m.end()
                break
            if span is None:  # not a date: a shorter expression may start further on
                continue
            out.append(span)
            tried = m.end()
            break
        else:
            tried = at + 1
    return out


def _span(text: str, m: re.Match[str], today: dt.date, past: bool) -> DateSpan | None:
    """The span of one match, checked: within the text, a real interval; or None."""
    name = t.cast(str, m.lastgroup)
    try:
        interval = RESOLVE[name](m, today, past)
    except (ValueError, OverflowError):  # no such date, or out of the calendar's range
        return None
    if interval is None:
        return None
    start = next((m.start(g) for g in BODY.get(name, ()) if m.start(g) >= 0), m.start())
    end = m.end()
    first, last = interval
    if not (first <= last and 0 <= start < end <= len(text)):
        return None
    return DateSpan(text[start:end], first, last, start)
