import datetime

import pytest

from memsvc import clock


@pytest.mark.parametrize(
    "ms", [0, 1, 999, 1_795_346_152_436, 1_709_251_199_999, 253_402_300_799_999]
)
def test_iso_matches_javascripts_to_iso_string(ms):
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    assert clock.iso(ms) == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def test_now_is_in_milliseconds():
    assert abs(clock.now_ms() - datetime.datetime.now(datetime.UTC).timestamp() * 1000) < 5000


def test_iso_is_right_for_every_day_it_remembers():
    """Dates are remembered per day and whole answers per instant: every instant of many
    days, before and after the epoch, still reads as datetime writes it."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    for day in range(-800, 30_000, 37):
        for ms in (day * 86_400_000, day * 86_400_000 + 86_399_999, day * 86_400_000 + 45_296_789):
            moment = epoch + datetime.timedelta(milliseconds=ms)
            expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
            assert clock.iso(ms) == expected
            assert clock.iso(ms) == expected  # and again, remembered
