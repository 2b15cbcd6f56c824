"""A memory's time, as the rest of the service layer reads it: its dates, resolved."""

from __future__ import annotations

from ..models import DateSpan
from ..models import Moment


def dates_of(text: str, when: Moment) -> tuple[DateSpan, ...] | None:
    """The time expressions of ``text`` resolved against ``when``, in its own offset; None: none."""
    return None
