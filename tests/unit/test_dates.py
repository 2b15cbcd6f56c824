"""Dates in text (memsvc.dates): the expressions understood, the traps left alone, the properties.

The table (tests/support/date_table.py) holds sentences and what find_dates
must find in each, against a Monday; the tests after it pin the rules that
depend on the day (weekdays, seasons, the reference's own offset) and the
query's interval; the properties hold for any text.
"""

from __future__ import annotations

import datetime as dt
import pathlib

import hypothesis
import pytest
from hypothesis import strategies as st

from memsvc import dates
from memsvc.dates import DateSpan
from tests.support.date_table import REF
from tests.support.date_table import TABLE


def _found(text: str, reference: dt.datetime = REF) -> list[tuple[str, dt.date, dt.date]]:
    return [(s.text, s.start, s.end) for s in dates.find_dates(text, reference)]


@pytest.mark.parametrize("sentence, expected", TABLE, ids=[row[0][:48] for row in TABLE])
def test_the_table(sentence, expected):
    assert _found(sentence) == expected


UTC = dt.UTC
D = dt.date


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_days_are_those_of_the_references_own_offset():
    # 22:30 UTC on 7 May is 00:30 on 8 May in UTC+2: "yesterday" is the 7th there.
    utc = at("2023-05-07T22:30:00+00:00")
    assert _found("yesterday", utc) == [("yesterday", D(2023, 5, 6), D(2023, 5, 6))]
    assert _found("yesterday", utc.astimezone(dt.timezone(dt.timedelta(hours=2)))) == [
        ("yesterday", D(2023, 5, 7), D(2023, 5, 7))
    ]
    assert _found("today", at("2023-05-08T01:00:00-05:00")) == [
        ("today", D(2023, 5, 8), D(2023, 5, 8))
    ]


def test_a_reference_without_an_offset_is_refused():
    with pytest.raises(ValueError, match="offset"):
        dates.find_dates("yesterday", dt.datetime(2023, 5, 8))
    with pytest.raises(ValueError, match="offset"):
        dates.query_interval("yesterday", dt.datetime(2023, 5, 8))


@pytest.mark.parametrize(
    "reference, expression, expected",
    [
        # On a Saturday: "last Friday" is the day before; "this"/"on" Friday the
        # one of the week (Monday to Sunday); "next Friday" the next week's.
        ("2023-05-13", "last Friday", (D(2023, 5, 12), D(2023, 5, 12))),
        ("2023-05-13", "this Friday", (D(2023, 5, 12), D(2023, 5, 12))),
        ("2023-05-13", "on Friday", (D(2023, 5, 12), D(2023, 5, 12))),
        ("2023-05-13", "next Friday", (D(2023, 5, 19), D(2023, 5, 19))),
        ("2023-05-13", "last Saturday", (D(2023, 5, 6), D(2023, 5, 6))),
        ("2023-05-13", "this weekend", (D(2023, 5, 13), D(2023, 5, 14))),
        ("2023-05-13", "last weekend", (D(2023, 5, 6), D(2023, 5, 7))),
        # On a Sunday, this week and this weekend end today.
        ("2023-05-14", "this week", (D(2023, 5, 8), D(2023, 5, 14))),
        ("2023-05-14", "next Monday", (D(2023, 5, 15), D(2023, 5, 15))),
        # In January: this winter is the one we are in; "in December" is this year's.
        ("2024-01-15", "this winter", (D(2023, 12, 1), D(2024, 2, 29))),
        ("2024-01-15", "last winter", (D(2022, 12, 1), D(2023, 2, 28))),
        ("2024-01-15", "next winter", (D(2024, 12, 1), D(2025, 2, 28))),
        ("2024-01-15", "in December", (D(2024, 12, 1), D(2024, 12, 31))),
        ("2024-01-15", "last December", (D(2023, 12, 1), D(2023, 12, 31))),
        ("2024-01-15", "last month", (D(2023, 12, 1), D(2023, 12, 31))),
        # In October, last summer is the one just gone; in July, the year before's.
        ("2023-10-02", "last summer", (D(2023, 6, 1), D(2023, 8, 31))),
        ("2023-07-02", "last summer", (D(2022, 6, 1), D(2022, 8, 31))),
        ("2023-07-02", "this summer", (D(2023, 6, 1), D(2023, 8, 31))),
        ("2023-07-02", "next summer", (D(2024, 6, 1), D(2024, 8, 31))),
        # A month's last day kept where the month has it.
        ("2023-03-31", "a month ago", (D(2023, 2, 1), D(2023, 2, 28))),
        ("2023-03-31", "the past month", (D(2023, 2, 28), D(2023, 3, 31))),
        ("2024-02-29", "a year ago", (D(2023, 1, 1), D(2023, 12, 31))),
        ("2024-02-29", "the past year", (D(2023, 2, 28), D(2024, 2, 29))),
        ("2023-01-02", "last week", (D(2022, 12, 26), D(2023, 1, 1))),
        ("2023-01-02", "the winter of 2022-23", (D(2022, 12, 1), D(2023, 2, 28))),
        ("2023-01-02", "the winter of 2022/2023", (D(2022, 12, 1), D(2023, 2, 28))),
    ],
)
def test_rules_that_depend_on_the_day(reference, expression, expected):
    [span] = dates.find_dates(f"It was {expression}.", at(reference + "T12:00:00+00:00"))
    assert (span.start, span.end) == expected
    assert span.text == expression.removeprefix("on ").removeprefix("in ")


@pytest.mark.parametrize(
    "text",
    [
        "the winter of 2022-24",  # not one winter
        "Friday, 6 May 2023",  # 6 May 2023 was a Saturday
        "on 31 April",
        "in 0999",
        "the 5th of Smarch",
        "in the year 3000",
    ],
)
def test_what_names_no_real_date_is_left_out(text):
    assert _found(text) == []


def test_a_span_knows_where_it_is_and_shows_as_the_memory_field():
    text = "We met yesterday and again on 3 March."
    spans = dates.find_dates(text, REF)
    assert [text[s.offset : s.offset + len(s.text)] for s in spans] == ["yesterday", "3 March"]
    assert spans[0].as_json() == {"text": "yesterday", "start": "2023-05-07", "end": "2023-05-07"}


@pytest.mark.parametrize(
    "query, now, expected, rest",
    [
        (
            "what did I cook last weekend?",
            "2023-05-08",
            ("last weekend", D(2023, 5, 6), D(2023, 5, 7)),
            "what did I cook?",
        ),
        ("in May 2023", "2024-01-15", ("May 2023", D(2023, 5, 1), D(2023, 5, 31)), ""),
        ("yesterday", "2023-05-08", ("yesterday", D(2023, 5, 7), D(2023, 5, 7)), ""),
        # A month, a day of a month or a weekday named alone: the latest not in the future.
        (
            "what happened in March?",
            "2023-05-08",
            ("March", D(2023, 3, 1), D(2023, 3, 31)),
            "what happened?",
        ),
        (
            "what happened in March?",
            "2023-02-08",
            ("March", D(2022, 3, 1), D(2022, 3, 31)),
            "what happened?",
        ),
        ("what happened in May?", "2023-05-08", ("May", D(2023, 5, 1), D(2023, 5, 31)), None),
        ("who called on 3 March?", "2023-01-10", ("3 March", D(2022, 3, 3), D(2022, 3, 3)), None),
        ("who called on Friday?", "2023-05-08", ("Friday", D(2023, 5, 5), D(2023, 5, 5)), None),
        ("who called on Monday?", "2023-05-08", ("Monday", D(2023, 5, 8), D(2023, 5, 8)), None),
        (
            "who called on 29 February?",
            "2023-05-08",
            ("29 February", D(2020, 2, 29), D(2020, 2, 29)),
            None,
        ),
        # Several expressions: the interval that covers them all.
        (
            "trips in June or July 2022",
            "2023-05-08",
            ("June or July 2022", D(2022, 6, 1), D(2022, 7, 31)),
            "trips or",
        ),
        (
            "between last Friday and yesterday, what did I eat",
            "2023-05-08",
            ("last Friday and yesterday", D(2023, 5, 5), D(2023, 5, 7)),
            "between and, what did I eat",
        ),
    ],
)
def test_the_interval_of_a_query(query, now, expected, rest):
    span, without = dates.split_query(query, at(now + "T12:00:00+02:00"))
    assert span is not None
    assert (span.text, span.start, span.end) == expected
    assert query[span.offset : span.offset + len(span.text)] == span.text
    assert dates.query_interval(query, at(now + "T12:00:00+02:00")) == span
    if rest is not None:
        assert without == rest


def test_a_query_without_time_has_no_interval():
    assert dates.split_query("what do I like to cook?", REF) == (None, "what do I like to cook?")
    assert dates.query_interval("May I ask what I cook?", REF) is None


# Properties: for any text and any reference, nothing raises, every span is
# where it says in the text with start <= end, and the answer is always the same.

_WORDS = st.sampled_from(
    "yesterday today tomorrow last this next the a an of in on ago from now week weekend month "
    "year day days weeks Friday friday May may March march 3 3rd 2023 2023-05-07 07/05/2023 "
    "summer winter fall before after couple past twenty-first first second , . - / :".split()
)
_TEXTS = st.one_of(
    st.text(max_size=200),
    st.lists(_WORDS, max_size=30).map(" ".join),
    st.lists(st.one_of(_WORDS, st.text(max_size=5)), max_size=30).map("".join),
)
_REFERENCES = st.datetimes(
    min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(UTC)
).map(lambda d: d.replace(tzinfo=dt.timezone(dt.timedelta(hours=(d.hour % 27) - 12))))


def _check(text: str, spans: list[DateSpan]) -> None:
    for span in spans:
        assert text[span.offset : span.offset + len(span.text)] == span.text
        assert span.text and span.start <= span.end
    for before, after in zip(spans, spans[1:], strict=False):
        assert before.offset + len(before.text) <= after.offset, "spans overlap"


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(text=_TEXTS, reference=_REFERENCES)
def test_any_text_any_reference(text, reference):
    spans = dates.find_dates(text, reference)
    _check(text, spans)
    assert dates.find_dates(text, reference) == spans
    interval, rest = dates.split_query(text, reference)
    if interval is None:
        assert rest == text
    else:
        _check(text, [interval])
        assert dates.split_query(text, reference) == (interval, rest)


def _documented() -> list[tuple[str, str]]:
    """docs/api.md's table of "Dates in text": (example, dates) for a text written on REF's day."""
    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = page.split("\n## Dates in text\n", 1)[1].split("\n#", 1)[0]
    assert "Monday 8 May 2023" in section and REF.date() == D(2023, 5, 8)
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[1] not in ("Example", "---"):
            rows.append((cells[1], cells[2]))
    return rows


@pytest.mark.parametrize("example, written", _documented())
def test_the_documented_examples_hold(example, written):
    first, _, last = written.partition(" to ")
    [span] = dates.find_dates(example, REF)
    assert (span.start.isoformat(), span.end.isoformat()) == (first, last or first)


def test_the_documented_table_is_read():
    assert len(_documented()) >= 30
