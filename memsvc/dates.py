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

The module is pure (no I/O, no clock). Every expression holds an *anchor* (a
digit, or a word naming a day, a unit of time, a weekday, a month or a
season); one regular expression finds the anchors, and the grammar (one
compiled alternation) is tried only at the few words before each. Each
position is tried at most once, so the cost grows with the text's length:
about 0.05 ms for a sentence, and under a second for 64 KiB of the densest
text (bench/dates.py).
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime as dt
import re
import typing as t

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


Interval = tuple[dt.date, dt.date]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_MONTH_NUMBER = {name: i + 1 for i, name in enumerate(_MONTHS)}
_MONTH_NUMBER.update(
    {name[:3]: i + 1 for i, name in enumerate(_MONTHS) if name != "may"} | {"sept": 9}
)
#: Month words that are also common English words in lower case ("I may", "they march").
_VERBS = {"may", "march", "mar"}
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}

_SMALL = (
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty"
).split()
_NUMBER_WORDS = {word: i + 1 for i, word in enumerate(_SMALL)} | {
    "a": 1, "an": 1, "a couple of": 2, "a couple": 2, "couple of": 2,
}  # fmt: skip

_ORDINAL_WORDS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
    "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
_ORDINALS = {word: i + 1 for i, word in enumerate(_ORDINAL_WORDS)}
_ORDINALS |= {f"twenty-{word}": 20 + i + 1 for i, word in enumerate(_ORDINAL_WORDS[:9])}
_ORDINALS |= {f"twenty {word}": 20 + i + 1 for i, word in enumerate(_ORDINAL_WORDS[:9])}
_ORDINALS |= {"thirtieth": 30, "thirty-first": 31, "thirty first": 31}


def _words(words: t.Iterable[str]) -> str:
    """A regular expression for any of ``words`` (the longest that matches), spaces as white space.

    Written as a trie ("j(?:an(?:uary)?|u(?:ly|ne))"), so that matching costs
    the length of a word rather than the number of words.
    """
    trie: dict[str, t.Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def pattern(node: dict[str, t.Any]) -> str:
        ends = "" in node
        options = [
            (r"\s+" if ch == " " else re.escape(ch)) + pattern(child)
            for ch, child in sorted(node.items())
            if ch
        ]
        if not options:
            return ""
        body = options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"
        return f"(?:{body})?" if ends else body

    return pattern(trie)


_WD = _words(_WEEKDAYS)
_MON = rf"(?:{_words(_MONTH_NUMBER)})\.?"
_MONF = _words(_MONTHS)
_NUM = rf"\d{{1,4}}|{_words(_NUMBER_WORDS)}"
_ORDW = _words(_ORDINALS)
_UNIT = r"day|week|month|year"
_PREP = (
    r"in|during|since|until|till|by|from|through|throughout|before|after|around|of"
    r"|(?:the\s+)?(?:beginning|start|middle|end)\s+of"
)
_DAYNUM = r"\d{1,2}(?:st|nd|rd|th)?"

# One branch per form, most specific first: at a given position the first
# branch that matches wins, and the scan takes the leftmost match.
_BRANCHES = {
    "iso": r"(?<![\w/.-])(?P<iso_y>\d{4})(?P<iso_sep>[-/])(?P<iso_m>\d{1,2})(?P=iso_sep)"
    r"(?P<iso_d>\d{1,2})(?!\d|[-/.]\d)",
    "dmy": rf"(?:(?P<dmy_wd>{_WD}),?\s+)?(?:the\s+)?"
    rf"(?:(?<![\w.:/-])(?P<dmy_d>{_DAYNUM})(?:\s+of)?|(?P<dmy_o>{_ORDW})\s+of)"
    rf"\s+(?P<dmy_m>{_MON})(?:,?\s+(?P<dmy_y>\d{{4}})|\s+(?P<dmy_r>last|this|next)\s+year)?"
    r"(?!\w|[-/.:]\d)",
    "mdy": rf"(?:(?P<mdy_wd>{_WD}),?\s+)?(?P<mdy_m>{_MON})\s+(?P<mdy_d>{_DAYNUM})"
    rf"(?:,?\s+(?P<mdy_y>\d{{4}})|\s+(?P<mdy_r>last|this|next)\s+year)?(?!\w|[-/.:,]\d)",
    "my": rf"(?:(?P<my_mod>early|mid|late)[\s-]+)?(?P<my_m>{_MON}),?\s+(?P<my_y>\d{{4}})"
    r"(?!\w|[-/.:]\d)",
    "sy": r"(?:the\s+)?(?P<sy_s>spring|summer|autumn)\s+(?:of\s+)?(?P<sy_y>\d{4})(?!\w|[-/.:]\d)"
    r"|(?P<sy_f>fall)\s+(?P<sy_fy>\d{4})(?!\w|[-/.:]\d)"
    r"|(?:the\s+)?winter\s+(?:of\s+)?(?P<sy_w1>\d{4})\s*[-/\u2013]\s*(?P<sy_w2>\d{2}|\d{4})(?!\w|[-/.:]\d)",
    "day": r"the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|tonight"
    r"|tomorrow|last\s+night|this\s+(?:morning|afternoon|evening)",
    "skip": r"the\s+(?P<skip_u>week|weekend|month|year)\s+(?P<skip_d>before\s+last|after\s+next)",
    "ago": rf"(?<![\w.,])(?P<ago_n>{_NUM})\s+(?P<ago_u>{_UNIT})s?\s+(?P<ago_d>ago|from\s+now)",
    "past": rf"the\s+past\s+(?:(?P<past_n>{_NUM})\s+)?(?P<past_u>{_UNIT})s?(?!\s+of\b)"
    rf"|the\s+(?:last|previous)\s+(?P<past_m>{_NUM})\s+(?P<past_v>{_UNIT})s?(?!\s+of\b)",
    "rel": rf"(?<!the\s)(?P<rel_d>this\s+past|this\s+coming|last|this|next)\s+"
    rf"(?P<rel_w>weekend|week|month|year|{_WD}|spring|summer|autumn|fall|winter|{_MONF})"
    r"(?!\s+of\b)",
    "pm": rf"(?:(?:{_PREP})\s+)?(?P<pm_mod>early|mid|late)[\s-]+(?P<pm_m>{_MONF})(?!\s*,?\s*\d)"
    rf"|(?:{_PREP})\s+(?P<pm_n>{_MONF})(?!\s*,?\s*\d)",
    "py": rf"(?:{_PREP})\s+(?P<py_y>\d{{4}})(?!\w|[-/.:,]\d)",
    # Habits and ranges are read whole, to be left out: "on Saturday mornings",
    # "Tuesday to Saturday", "the first Wednesday of each month".
    "habit": rf"{_WD}\s+(?:mornings|afternoons|evenings|nights|lunchtimes)"
    rf"|{_WD}\s*(?:-|\u2013|to|through|till|until)\s*{_WD}"
    rf"|(?:first|second|third|fourth|last)\s+{_WD}\s+of\s+(?:each|every|the)\s+month",
    "wd": rf"(?<!every\s)(?<!each\s)(?<!good\s)(?<!black\s)(?<!last\s)(?<!next\s)(?<!this\s)"
    rf"(?P<wd_d>{_WD})(?!\s+of\b)",
}
_PATTERN = re.compile(
    r"\b(?:"
    + "|".join(
        # An ISO date may run on into its time ("2023-05-07T10:00").
        rf"(?P<{name}>{body})" + ("" if name == "iso" else r"\b")
        for name, body in _BRANCHES.items()
    )
    + ")",
    re.IGNORECASE,
)

#: Where the expression starts inside a branch that may begin with a preposition.
_BODY = {"pm": ("pm_mod", "pm_n"), "py": ("py_y",)}

#: Years a bare "in 2021" may name; a date with a month or day may name any year from 1000.
_PLAIN_YEARS = range(1900, 2101)


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


#: Every expression holds one of these: a digit, or a word naming a day, a unit
#: of time, a weekday, a month or a season. The scan looks only near them.
_ANCHOR = re.compile(
    r"\d|\b(?:"
    + _words(
        ["yesterday", "today", "tonight", "tomorrow", "night", "morning", "afternoon", "evening"]
        + ["day", "days", "week", "weeks", "weekend", "weekends", "month", "months", "year"]
        + ["years", *_WEEKDAYS, *_MONTH_NUMBER, *_SEASONS]
    )
    + r")\b",
    re.IGNORECASE,
)
#: How far before its first anchor an expression may start: at most five
#: words ("the past a couple of days", "the beginning of early May"; "twenty-
#: first" is two), within a stretch of characters that leaves room for runs
#: of white space between them.
_WORDS_BEFORE = 5
_REACH = 80
_WORD_START = re.compile(r"\b\w")


def _find(text: str, today: dt.date, *, past: bool) -> list[DateSpan]:
    """Each anchor's expression: the first match at one of the few word starts before it.

    Every start position is tried at most once, and only near an anchor, so a
    text costs its length (to find anchors) plus a few matches per anchor.
    """
    out: list[DateSpan] = []
    tried = 0  # every word start before this has been tried (or lies inside a span)
    match = _PATTERN.match
    for anchor in _ANCHOR.finditer(text):
        at = anchor.start()
        if at < tried:
            continue
        starts = [w.start() for w in _WORD_START.finditer(text, max(tried, at - _REACH), at + 1)]
        for start in starts[-_WORDS_BEFORE - 1 :]:
            m = match(text, start)
            if m is None:
                continue
            try:
                span = _span(text, m, today, past)
            except _Skip:  # none of it is placed, nor any part of it
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


class _Skip(Exception):
    """The expression is read whole and left out: it contradicts itself ("Friday, 6 May 2023",
    a Saturday) or names no single interval ("on Saturday mornings")."""


def _span(text: str, m: re.Match[str], today: dt.date, past: bool) -> DateSpan | None:
    """The span of one match, checked: within the text, a real interval; or None."""
    name = t.cast(str, m.lastgroup)
    try:
        interval = _RESOLVE[name](m, today, past)
    except (ValueError, OverflowError):  # no such date, or out of the calendar's range
        return None
    if interval is None:
        return None
    start = next((m.start(g) for g in _BODY.get(name, ()) if m.start(g) >= 0), m.start())
    end = m.end()
    first, last = interval
    if not (first <= last and 0 <= start < end <= len(text)):
        return None
    return DateSpan(text[start:end], first, last, start)


# Resolution: each branch's match -> an interval, or None (not a date after all).


def _day(d: dt.date) -> Interval:
    return d, d


def _week(d: dt.date) -> Interval:
    monday = d - dt.timedelta(days=d.weekday())
    return monday, monday + dt.timedelta(days=6)


def _month(year: int, month: int) -> Interval:
    return dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1])


def _add_months(year: int, month: int, n: int) -> tuple[int, int]:
    y, m = divmod(year * 12 + month - 1 + n, 12)
    return y, m + 1


def _year(year: int) -> Interval:
    return dt.date(year, 1, 1), dt.date(year, 12, 31)


def _season(first_month: int, year: int) -> Interval:
    """The three months from ``first_month`` of ``year`` (winter runs into the next year)."""
    y, m = _add_months(year, first_month, 2)
    return dt.date(year, first_month, 1), _month(y, m)[1]


def _shift(d: dt.date, unit: str, n: int) -> dt.date:
    """``d`` moved by ``n`` units (a month's day kept where it exists, else its last day)."""
    if unit == "day":
        return d + dt.timedelta(days=n)
    if unit == "week":
        return d + dt.timedelta(weeks=n)
    y, m = _add_months(d.year, d.month, n * (12 if unit == "year" else 1))
    return dt.date(y, m, min(d.day, calendar.monthrange(y, m)[1]))


def _unit(d: dt.date, unit: str) -> Interval:
    """The whole day, week, month or year ``d`` is in."""
    if unit == "day":
        return _day(d)
    if unit == "week":
        return _week(d)
    if unit == "month":
        return _month(d.year, d.month)
    return _year(d.year)


def _weekend(d: dt.date) -> Interval:
    saturday = _week(d)[0] + dt.timedelta(days=5)
    return saturday, saturday + dt.timedelta(days=1)


def _number(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


def _month_number(word: str, *, year_given: bool) -> int | None:
    """The month a word names, or None for "may"/"march" in lower case without a year."""
    key = word.rstrip(".").lower()
    if key in _VERBS and word[0].islower() and not year_given:
        return None
    return _MONTH_NUMBER[key]


def _yearless(month: int, day: int, today: dt.date, past: bool) -> dt.date:
    """A day of a month named without a year: in ``today``'s year, or the latest not after it.

    :raises ValueError: no such day (in ``today``'s year, or in the last eight years).
    """
    if not past:
        return dt.date(today.year, month, day)
    for year in range(today.year, today.year - 9, -1):
        try:
            d = dt.date(year, month, day)
        except ValueError:  # 29 February of a common year
            continue
        if d <= today:
            return d
    raise ValueError(f"no {month}-{day}")


def _plain_month(month: int, today: dt.date, past: bool) -> Interval:
    year = today.year - 1 if past and month > today.month else today.year
    return _month(year, month)


def _full_year(text: str | None) -> int | None:
    if text is None:
        return None
    year = int(text)
    if not 1000 <= year <= 2999:
        raise ValueError(year)
    return year


def _resolve_iso(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    year = _full_year(m["iso_y"])
    return _day(dt.date(t.cast(int, year), int(m["iso_m"]), int(m["iso_d"])))


def _day_of_month(
    day: int, month_word: str, year_text: str | None, weekday: str | None,
    today: dt.date, past: bool, relative_year: str | None = None,
) -> Interval | None:  # fmt: skip
    year = _full_year(year_text)
    if relative_year is not None:  # "9 October next year"
        year = today.year + {"last": -1, "this": 0, "next": 1}[relative_year.lower()]
    month = _month_number(month_word, year_given=year_text is not None)
    if month is None:
        return None
    d = dt.date(year, month, day) if year is not None else _yearless(month, day, today, past)
    if weekday is not None and _WEEKDAYS.index(weekday.lower()) != d.weekday():
        raise _Skip  # "Friday, 5 May 2023" must be a Friday
    return _day(d)


def _resolve_dmy(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    if m["dmy_d"] is not None:
        day = int(m["dmy_d"].rstrip("stndrh"))
    else:
        day = _ORDINALS[" ".join(m["dmy_o"].lower().split())]
    return _day_of_month(day, m["dmy_m"], m["dmy_y"], m["dmy_wd"], today, past, m["dmy_r"])


def _resolve_mdy(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    day = int(m["mdy_d"].rstrip("stndrh"))
    return _day_of_month(day, m["mdy_m"], m["mdy_y"], m["mdy_wd"], today, past, m["mdy_r"])


def _resolve_my(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    year = t.cast(int, _full_year(m["my_y"]))
    return _month(year, t.cast(int, _month_number(m["my_m"], year_given=True)))


def _resolve_sy(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    if m["sy_w1"] is not None:
        first = t.cast(int, _full_year(m["sy_w1"]))
        second = m["sy_w2"]
        if int(second) != (first + 1 if len(second) == 4 else (first + 1) % 100):
            return None
        return _season(12, first)
    name, year = (m["sy_s"], m["sy_y"]) if m["sy_s"] is not None else (m["sy_f"], m["sy_fy"])
    return _season(_SEASONS[name.lower()], t.cast(int, _full_year(year)))


_DAY_OFFSETS = {
    "yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1, "last night": -1,
    "this morning": 0, "this afternoon": 0, "this evening": 0,
    "the day before yesterday": -2, "the day after tomorrow": 2,
}  # fmt: skip


def _resolve_day(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    key = " ".join(m["day"].lower().split())
    return _day(today + dt.timedelta(days=_DAY_OFFSETS[key]))


def _resolve_skip(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    unit = m["skip_u"].lower()
    n = -2 if m["skip_d"].lower().startswith("before") else 2
    if unit == "weekend":
        return _weekend(_shift(today, "week", n))
    return _unit(_shift(today, unit, n), unit)


def _resolve_ago(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    n = _number(m["ago_n"])
    unit = m["ago_u"].lower()
    sign = -1 if m["ago_d"].lower() == "ago" else 1
    return _unit(_shift(today, unit, sign * n), unit)


def _resolve_past(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    if m["past_u"] is not None:
        n = _number(m["past_n"]) if m["past_n"] is not None else 1
        unit = m["past_u"].lower()
    else:
        n, unit = _number(m["past_m"]), m["past_v"].lower()
    return _shift(today, unit, -n), today


def _resolve_rel(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    direction = " ".join(m["rel_d"].lower().split())
    what = m["rel_w"]
    key = what.lower()
    step = {"last": -1, "this past": -1, "this": 0, "this coming": 0, "next": 1}[direction]
    if key in ("week", "month", "year"):
        return _unit(_shift(today, key, step), key)
    if key == "weekend":
        return _weekend(_shift(today, "week", step))
    if key in _WEEKDAYS:
        wanted = _WEEKDAYS.index(key)
        if step < 0:  # the latest one before today
            return _day(today - dt.timedelta(days=(today.weekday() - wanted - 1) % 7 + 1))
        return _day(_week(today)[0] + dt.timedelta(days=wanted + 7 * step))
    if key in _SEASONS:
        return _relative_season(_SEASONS[key], today, step)
    month = _month_number(what, year_given=False)
    if month is None:
        return None
    if step == 0:
        return _plain_month(month, today, past)
    if step < 0:  # the latest one that ended before today
        year = today.year if month < today.month else today.year - 1
    else:  # the first one to start after today
        year = today.year if month > today.month else today.year + 1
    return _month(year, month)


def _relative_season(first_month: int, today: dt.date, step: int) -> Interval:
    if step == 0:
        if first_month == 12 and today.month <= 2:
            return _season(12, today.year - 1)  # the winter we are in
        return _season(first_month, today.year)
    # The occurrences around today, oldest first.
    seasons = [_season(first_month, year) for year in range(today.year - 2, today.year + 2)]
    if step < 0:
        return [s for s in seasons if s[1] < today][-1]
    return [s for s in seasons if s[0] > today][0]


def _resolve_pm(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    month = _month_number(m["pm_m"] or m["pm_n"], year_given=False)
    return None if month is None else _plain_month(month, today, past)


def _resolve_py(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    year = int(m["py_y"])
    return _year(year) if year in _PLAIN_YEARS else None


def _resolve_habit(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    raise _Skip  # a habit or a range of weekdays names no one day


def _resolve_wd(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    wanted = _WEEKDAYS.index(m["wd_d"].lower())
    if past:  # the latest one on or before today
        return _day(today - dt.timedelta(days=(today.weekday() - wanted) % 7))
    return _day(_week(today)[0] + dt.timedelta(days=wanted))


_RESOLVE: dict[str, t.Callable[[re.Match[str], dt.date, bool], Interval | None]] = {
    "iso": _resolve_iso,
    "dmy": _resolve_dmy,
    "mdy": _resolve_mdy,
    "my": _resolve_my,
    "sy": _resolve_sy,
    "day": _resolve_day,
    "skip": _resolve_skip,
    "ago": _resolve_ago,
    "past": _resolve_past,
    "rel": _resolve_rel,
    "pm": _resolve_pm,
    "py": _resolve_py,
    "habit": _resolve_habit,
    "wd": _resolve_wd,
}
