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
