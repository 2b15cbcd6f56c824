"""From a match of the grammar to calendar dates: one resolver per branch.

Each takes the match, the reference day and whether a query asks (``past``:
a month, day or weekday named alone is the latest not in the future), and
gives an inclusive interval, or None when the match names no date after all.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
import typing as t

from .grammar import MONTH_NUMBER
from .grammar import NUMBER_WORDS
from .grammar import ORDINALS
from .grammar import SEASONS
from .grammar import VERBS
from .grammar import WEEKDAYS

Interval = tuple[dt.date, dt.date]


#: Years a bare "in 2021" may name; a date with a month or day may name any year from 1000.
_PLAIN_YEARS = range(1900, 2101)


class Skip(Exception):
    """The expression is read whole and left out: it contradicts itself ("Friday, 6 May 2023",
    a Saturday) or names no single interval ("on Saturday mornings")."""


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
    return int(word) if word.isdigit() else NUMBER_WORDS[word]


def _month_number(word: str, *, year_given: bool) -> int | None:
    """The month a word names, or None for "may"/"march" in lower case without a year."""
    key = word.rstrip(".").lower()
    if key in VERBS and word[0].islower() and not year_given:
        return None
    return MONTH_NUMBER[key]


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
    if weekday is not None and WEEKDAYS.index(weekday.lower()) != d.weekday():
        raise Skip  # "Friday, 5 May 2023" must be a Friday
    return _day(d)


def _resolve_dmy(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    if m["dmy_d"] is not None:
        day = int(m["dmy_d"].rstrip("stndrh"))
    else:
        day = ORDINALS[" ".join(m["dmy_o"].lower().split())]
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
    return _season(SEASONS[name.lower()], t.cast(int, _full_year(year)))


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
    if key in WEEKDAYS:
        wanted = WEEKDAYS.index(key)
        if step < 0:  # the latest one before today
            return _day(today - dt.timedelta(days=(today.weekday() - wanted - 1) % 7 + 1))
        return _day(_week(today)[0] + dt.timedelta(days=wanted + 7 * step))
    if key in SEASONS:
        return _relative_season(SEASONS[key], today, step)
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
    raise Skip  # a habit or a range of weekdays names no one day


def _resolve_wd(m: re.Match[str], today: dt.date, past: bool) -> Interval | None:
    wanted = WEEKDAYS.index(m["wd_d"].lower())
    if past:  # the latest one on or before today
        return _day(today - dt.timedelta(days=(today.weekday() - wanted) % 7))
    return _day(_week(today)[0] + dt.timedelta(days=wanted))


RESOLVE: dict[str, t.Callable[[re.Match[str], dt.date, bool], Interval | None]] = {
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
