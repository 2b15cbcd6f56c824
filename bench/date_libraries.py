"""Date libraries against memsvc.dates: right answers over the table, false positives, cost.

The table is tests/support/date_table.py (sentences with the spans expected,
traps with none). A library is asked for the dates in each sentence,
resolved against the table's reference; a row is right when it finds exactly
the expected expressions (same number, in order) and each date it gives lies
inside the expected interval (lenient for the libraries that give one point
in time rather than an interval: "last month" is right as any day of April).
"exact" counts rows whose intervals are the expected ones. Then the time per
sentence (the table's, one after the other) and for one 64 KiB text (the
table's sentences repeated), or what it raised.

Runs in any Python with the libraries to compare and nothing else of
memsvc's (memsvc.dates is loaded from its folder), so each candidate can be
measured in a scratch environment of its own::

    python -m venv /tmp/dates && /tmp/dates/bin/pip install dateparser \\
        parsedatetime timefhuman ctparse datefinder recognizers-text-suite 'emoji<1'
    /tmp/dates/bin/python -m bench.date_libraries [NAME ...]

NAME: memsvc, dateparser, parsedatetime, timefhuman, ctparse, datefinder,
recognizers (default: every one that imports).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import io
import pathlib
import sys
import time
import typing as t
import warnings

from bench.report import recording
from tests.support.date_table import REF
from tests.support.date_table import TABLE

Found = list[tuple[str, dt.date, dt.date]]
NAIVE = REF.replace(tzinfo=None)


def _memsvc() -> t.Callable[[str], Found]:
    path = pathlib.Path(__file__).resolve().parents[1] / "memsvc" / "dates"
    spec = importlib.util.spec_from_file_location(
        "memsvc_dates", path / "__init__.py", submodule_search_locations=[str(path)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclass looks itself up there, and its modules import each other from there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return lambda text: [(s.text, s.start, s.end) for s in module.find_dates(text, REF)]


def _dateparser() -> t.Callable[[str], Found]:
    from dateparser.search import search_dates

    settings = {"RELATIVE_BASE": NAIVE, "PREFER_DATES_FROM": "current_period"}

    def find(text: str) -> Found:
        found = search_dates(text, languages=["en"], settings=settings) or []
        return [(s, d.date(), d.date()) for s, d in found]

    return find


def _parsedatetime() -> t.Callable[[str], Found]:
    import parsedatetime

    calendar = parsedatetime.Calendar()

    def find(text: str) -> Found:
        found = calendar.nlp(text, sourceTime=NAIVE) or ()
        # Flags: 1 a date, 2 a time, 3 both; times alone are not dates.
        return [(s, d.date(), d.date()) for d, flag, _, _, s in found if flag in (1, 3)]

    return find


def _timefhuman() -> t.Callable[[str], Found]:
    from timefhuman import tfhConfig
    from timefhuman import timefhuman

    config = tfhConfig(now=NAIVE, return_matched_text=True)

    def day(value: t.Any) -> dt.date | None:
        if isinstance(value, dt.datetime):
            return value.date()
        return value if isinstance(value, dt.date) else None

    def find(text: str) -> Found:
        out = []
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it cannot parse
            found = timefhuman(text, config=config)
        for s, _, value in found:  # (text, (start, end), value)
            first, last = value if isinstance(value, tuple) else (value, value)
            if isinstance(first, list):
                first = last = first[0]
            a, b = day(first), day(last)
            if a is not None and b is not None:
                out.append((s, a, b))
        return out

    return find


def _ctparse() -> t.Callable[[str], Found]:
    from ctparse import ctparse
    from ctparse.types import Interval
    from ctparse.types import Time

    def day(value: t.Any) -> dt.date | None:
        if value is None or not (value.year and value.month and value.day):
            return None
        return dt.date(value.year, value.month, value.day)

    def find(text: str) -> Found:
        parse = ctparse(text, ts=NAIVE, timeout=1)  # one resolution per text
        if parse is None:
            return []
        value, s = parse.resolution, text[parse.resolution.mstart : parse.resolution.mend]
        if isinstance(value, Time) and day(value) is not None:
            return [(s, t.cast(dt.date, day(value)), t.cast(dt.date, day(value)))]
        if isinstance(value, Interval) and day(value.t_from) is not None:
            first = t.cast(dt.date, day(value.t_from))
            return [(s, first, day(value.t_to) or first)]
        return []

    return find


def _datefinder() -> t.Callable[[str], Found]:
    import datefinder

    def find(text: str) -> Found:
        found = datefinder.find_dates(text, source=True, base_date=NAIVE)
        return [(s, d.date(), d.date()) for d, s in found]

    return find


def _recognizers() -> t.Callable[[str], Found]:
    from recognizers_date_time import DateTimeRecognizer
    from recognizers_text import Culture

    model = DateTimeRecognizer(Culture.English).get_datetime_model(Culture.English)

    def find(text: str) -> Found:
        out = []
        for result in model.parse(text, NAIVE):
            values = (result.resolution or {}).get("values") or [{}]
            value = values[-1]
            with contextlib.suppress(KeyError, ValueError):
                if value.get("type") == "date":
                    d = dt.date.fromisoformat(value["value"][:10])
                    out.append((result.text, d, d))
                elif value.get("type") == "daterange":
                    first = dt.date.fromisoformat(value["start"][:10])
                    last = dt.date.fromisoformat(value["end"][:10]) - dt.timedelta(days=1)
                    out.append((result.text, first, last))
        return out

    return find


CANDIDATES: dict[str, t.Callable[[], t.Callable[[str], Found]]] = {
    "memsvc": _memsvc,
    "dateparser": _dateparser,
    "parsedatetime": _parsedatetime,
    "timefhuman": _timefhuman,
    "ctparse": _ctparse,
    "datefinder": _datefinder,
    "recognizers": _recognizers,
}


def _plain(text: str) -> str:
    text = " ".join(text.lower().split())
    for word in ("in ", "on ", "during ", "at "):
        text = text.removeprefix(word)
    return text


def _safe(find: t.Callable[[str], Found], text: str) -> Found | str:
    try:
        return find(text)
    except Exception as e:  # a library's failure is a result here
        return f"raised {type(e).__name__}"


def score(find: t.Callable[[str], Found]) -> dict[str, int]:
    right = exact = traps_hit = missed = raised = 0
    for sentence, expected in TABLE:
        found = _safe(find, sentence)
        if isinstance(found, str):
            raised += 1
            continue
        if not expected and found:
            traps_hit += 1
        if expected and not found:
            missed += 1
        if len(found) != len(expected):
            continue
        pairs = list(zip(expected, found, strict=True))
        if all(e[1] <= f[1] <= e[2] and e[1] <= f[2] <= e[2] for e, f in pairs):
            right += 1
            if all(_plain(e[0]) == _plain(f[0]) and e[1:] == f[1:] for e, f in pairs):
                exact += 1
    return {
        "right": right, "exact": exact, "traps_hit": traps_hit, "missed": missed, "raised": raised,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(CANDIDATES))
    args = parser.parse_args()
    unknown = set(args.names) - set(CANDIDATES)
    if unknown:
        parser.error(f"unknown: {', '.join(sorted(unknown))} (known: {', '.join(CANDIDATES)})")
    warnings.simplefilter("ignore")
    sentences = [s for s, _ in TABLE if s]
    long = (" ".join(sentences) + " ") * (65_536 // len(" ".join(sentences)) + 1)
    long = long[:65_536]
    traps = sum(1 for _, expected in TABLE if not expected)
    print(f"{len(TABLE)} rows, {traps} of them traps (no date to find); reference {REF}")
    for name in args.names or list(CANDIDATES):
        try:
            find = CANDIDATES[name]()
        except ImportError as e:
            print(f"{name:14} not installed ({e})")
            continue
        figures = score(find)
        started = time.perf_counter()
        for sentence in sentences:
            _safe(find, sentence)
        per_sentence = (time.perf_counter() - started) / len(sentences)
        # 4 KiB first: a library whose cost grows faster than the text's is
        # not given 64 KiB (one took minutes and all the memory).
        cost = {}
        for size in (4096, 65_536):
            started = time.perf_counter()
            found = _safe(find, long[:size])
            cost[size] = f"{time.perf_counter() - started:6.2f} s" + (
                f" ({found})" if isinstance(found, str) else ""
            )
            if time.perf_counter() - started > 2:
                cost[65_536] = "not tried"
                break
        print(
            f"{name:14} right {figures['right']:3}/{len(TABLE)}  exact {figures['exact']:3}  "
            f"traps taken for dates {figures['traps_hit']:2}/{traps}  "
            f"dates missed {figures['missed']:2}  raised {figures['raised']:2}  "
            f"{per_sentence * 1000:7.3f} ms/sentence  4 KiB: {cost[4096]}  "
            f"64 KiB: {cost[65_536]}",
            flush=True,
        )


if __name__ == "__main__":
    with recording("date_libraries"):
        main()
