"""A memory's time, as the rest of the service layer reads it: its dates, resolved."""

from __future__ import annotations

import datetime as dt

from .. import dates
from ..models import DateSpan
from ..models import Moment

#: At most this many of a text's dates are kept (the first ones): a long text
#: dense with dates would otherwise carry thousands, and answer with them.
MAX_DATES = 50


def dates_of(text: str, when: Moment) -> tuple[DateSpan, ...] | None:
    """The time expressions of ``text`` resolved against ``when``, in its own offset; None: none.

    A time given in UTC (or not given: the time of a call) is read in UTC.
    """
    zone = dt.timezone(dt.timedelta(minutes=when.offset or 0))
    reference = dt.datetime.fromtimestamp(when.ms / 1000, zone)
    found = dates.find_dates(text, reference)[:MAX_DATES]
    if not found:
        return None
    return tuple(DateSpan(d.text, d.start.isoformat(), d.end.isoformat()) for d in found)


def ranks_by_time(mode: str, time: str | None) -> bool:
    """Whether a search ranks by the time its query names: ``time`` "on" or "off", else
    (not given) in hybrid mode only."""
    return time == "on" if time is not None else mode == "hybrid"


def query_time(query: str, now: Moment) -> DateSpan | None:
    """The interval a search query's time expressions name ("last week"), resolved against
    ``now`` in its own offset; None: it names none."""
    zone = dt.timezone(dt.timedelta(minutes=now.offset or 0))
    found = dates.query_interval(query, dt.datetime.fromtimestamp(now.ms / 1000, zone))
    if found is None:
        return None
    return DateSpan(found.text, found.start.isoformat(), found.end.isoformat())
