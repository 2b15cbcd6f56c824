"""What every limiter answers: exact rolling windows, slots, and the same messages.

Run against the per-key files a SQLite deployment uses (``memsvc.limits``)
and against PostgreSQL (``memsvc.store.postgres.limits``), which several app
servers share; what only one of them does is in test_limits.py and
test_limits_pg.py.
"""

from __future__ import annotations

import random

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from memsvc.limits import Limiter
from memsvc.limits import Limits
from memsvc.limits import Refused
from memsvc.store.postgres.limits import PgLimiter
from memsvc.store.postgres.limits import install
from tests.support.limiting import RATE_ONLY
from tests.support.limiting import Clock
from tests.support.limiting import S
from tests.support.limiting import admit
from tests.support.postgres import drop_database
from tests.support.postgres import fresh_database


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def limiter(store_kind, tmp_path, clock, request):
    """The limiter of a deployment on this store, on a clock the test moves."""
    if store_kind == "sqlite":
        return Limiter(str(tmp_path / "limits"), clock=clock)
    url = fresh_database(request.node.name)
    with psycopg.connect(url) as conn:
        install(conn)
    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)

    def close() -> None:
        pool.close()
        drop_database(url)

    request.addfinalizer(close)
    return PgLimiter(pool.connection, clock=clock)


def test_the_window_rolls_it_is_not_a_calendar_minute(limiter, clock):
    start = clock.now
    clock.now = start + 59 * S
    assert all(admit(limiter, RATE_ONLY) != "refused" for _ in range(100))
    clock.now = start + 61 * S  # a new calendar minute, but the same 60 s
    assert admit(limiter, RATE_ONLY) == "refused"
    clock.now = start + 119 * S - 1
    assert admit(limiter, RATE_ONLY) == "refused"
    clock.now = start + 119 * S
    assert all(admit(limiter, RATE_ONLY) != "refused" for _ in range(100))
    assert admit(limiter, RATE_ONLY) == "refused"


def test_no_60_second_window_ever_holds_more_than_the_limit(limiter, clock):
    limits = Limits(10, 0)
    accepted = []
    for _ in range(2000):
        clock.now += 97  # about 10 attempts a second
        if admit(limiter, limits) != "refused":
            accepted.append(clock.now)
    for i, t in enumerate(accepted):
        in_window = [x for x in accepted[i:] if x < t + 60 * S]
        assert len(in_window) <= 10
    assert len(accepted) >= 30  # and the limit is not stricter than it says


def test_refused_calls_use_up_nothing(limiter, clock):
    limits = Limits(2, 0)
    first = clock.now
    admit(limiter, limits)
    clock.now += 1
    admit(limiter, limits)
    for _ in range(50):
        clock.now += 100
        assert admit(limiter, limits) == "refused"
    clock.now = first + 60 * S
    assert admit(limiter, limits) != "refused"
    assert admit(limiter, limits) == "refused"
    clock.now = first + 60 * S + 1
    assert admit(limiter, limits) != "refused"


def test_retry_after_says_when_the_oldest_call_leaves_the_window(limiter, clock):
    limits = Limits(1, 0)
    admit(limiter, limits)
    clock.now += 15_500
    with pytest.raises(Refused, match="^Rate limit exceeded: 1 requests per minute$") as e:
        limiter.acquire("k", limits)
    assert e.value.retry_after == 45
    clock.now += 44_400  # 100 ms to go: still at least a second
    with pytest.raises(Refused) as e:
        limiter.acquire("k", limits)
    assert e.value.retry_after == 1


def test_concurrency_slots_are_held_until_released(limiter):
    limits = Limits(0, 10)
    tokens = [limiter.acquire("k", limits) for _ in range(10)]
    assert limiter.executing("k") == 10
    with pytest.raises(
        Refused, match="^Too many concurrent requests: at most 10 at once per API key$"
    ) as e:
        limiter.acquire("k", limits)
    assert e.value.retry_after == 1
    limiter.release("k", tokens[3])
    assert limiter.executing("k") == 9
    assert limiter.acquire("k", limits) is not None


def test_a_call_refused_for_concurrency_uses_no_rate_quota(limiter, clock):
    limits = Limits(3, 1)
    token = limiter.acquire("k", limits)
    for _ in range(5):
        assert admit(limiter, limits) == "refused"
    limiter.release("k", token)
    assert admit(limiter, limits) != "refused"  # second of three
    limiter.release("k", None)


def test_keys_are_limited_separately(limiter):
    for _ in range(3):
        limiter.acquire("a", Limits(3, 0))
    assert admit(limiter, Limits(3, 0), "a") == "refused"
    assert admit(limiter, Limits(3, 0), "b") != "refused"


def test_zero_means_unlimited(limiter):
    assert all(limiter.acquire("k", Limits(0, 0)) is None for _ in range(1000))
    limiter.release("k", None)


def test_expired_slots_free_themselves(limiter, clock):
    limits = Limits(0, 2)
    limiter.acquire("k", limits)
    limiter.acquire("k", limits)
    assert admit(limiter, limits) == "refused"
    clock.now += limiter.slot_ttl_ms
    assert limiter.executing("k") == 0
    assert admit(limiter, limits) != "refused"


def test_changing_a_keys_limits_keeps_its_recent_calls(limiter, clock):
    for _ in range(5):
        clock.now += 1
        limiter.acquire("k", Limits(5, 0))
    assert admit(limiter, Limits(5, 0)) == "refused"
    for _ in range(5):
        assert admit(limiter, Limits(10, 0)) != "refused"
    assert admit(limiter, Limits(10, 0)) == "refused"
    assert admit(limiter, Limits(3, 0)) == "refused"
    clock.now += 60 * S
    assert admit(limiter, Limits(3, 0)) != "refused"


def test_lowering_a_limit_and_raising_it_again_forgets_no_call(limiter, clock):
    start = clock.now
    for _ in range(100):
        clock.now += 1
        assert admit(limiter, Limits(100, 0)) != "refused"
    assert admit(limiter, Limits(10, 0)) == "refused"
    # Raised again within the minute: the 100 calls still fill it.
    assert admit(limiter, Limits(100, 0)) == "refused"
    clock.now = start + 30 * S
    assert admit(limiter, Limits(50, 0)) == "refused"
    assert admit(limiter, Limits(100, 0)) == "refused"
    assert [admit(limiter, Limits(105, 0)) != "refused" for _ in range(6)] == [True] * 5 + [False]
    # The first hundred have left the window; the five of 30 s are in it.
    clock.now = start + 60 * S + 100
    assert [admit(limiter, Limits(10, 0)) != "refused" for _ in range(6)] == [True] * 5 + [False]
    assert [admit(limiter, Limits(100, 0)) != "refused" for _ in range(91)] == [True] * 90 + [False]


def test_no_window_holds_more_than_the_limit_in_force_when_limits_keep_changing(limiter, clock):
    # Each accepted unit, at its time, was within the limit then in force:
    # counting it, the 60 s up to it held no more than that limit.
    rng = random.Random(11)
    accepted: list[tuple[int, int, int]] = []  # (time, units counted, the limit then)
    for _ in range(700):
        clock.now += rng.randint(20, 600)
        limits = Limits(rng.choice([3, 10, 10, 40, 100]), 0)
        units = min(rng.choice([1, 1, 1, 1, 2, 3]), limits.per_minute)
        answer = call_costing(limiter, limits, units)
        if answer != "refused":
            accepted.append((clock.now, units if answer == "ok" else 1, limits.per_minute))
    for t, _, limit in accepted:
        held = sum(u for x, u, _ in accepted if t - 60 * S < x <= t)
        assert held <= limit, (t, held, limit)
    assert len(accepted) >= 100  # and calls do get through


# -- calls that cost more than one ---------------------------------------------------


def call_costing(limiter, limits, units, key="k"):
    """Admit a call, then charge the rest of its cost: "ok", "refused", or the charge's Refused."""
    if admit(limiter, limits, key) == "refused":
        return "refused"
    try:
        limiter.charge(key, limits, units - 1)
    except Refused as e:
        return e
    return "ok"


def test_a_call_charged_more_takes_as_many_calls_of_the_minute(limiter, clock):
    limits = Limits(10, 0)
    assert call_costing(limiter, limits, 4) == "ok"
    assert call_costing(limiter, limits, 3) == "ok"
    assert [admit(limiter, limits) != "refused" for _ in range(4)] == [True, True, True, False]
    clock.now += 60 * S
    assert call_costing(limiter, limits, 10) == "ok"  # a whole minute's worth, when free
    assert admit(limiter, limits) == "refused"


def test_a_charge_that_does_not_fit_records_nothing_more(limiter, clock):
    limits = Limits(10, 0)
    start = clock.now
    for _ in range(6):
        admit(limiter, limits)
        clock.now += S
    clock.now = start + 10 * S
    refused = call_costing(limiter, limits, 5)  # 7 counted, 4 more do not fit
    assert isinstance(refused, Refused)
    assert refused.message == "Rate limit exceeded: 10 requests per minute"
    # A new call of the same cost fits once two more of the six have left.
    assert refused.retry_after == 51
    # The refused call counts as one call, never as its cost: 3 fit.
    assert [admit(limiter, limits) != "refused" for _ in range(4)] == [True, True, True, False]


def test_retry_after_of_a_costly_call_is_when_the_same_call_fits(limiter, clock):
    limits = Limits(10, 0)
    start = clock.now
    for _ in range(8):
        admit(limiter, limits, "early")
        admit(limiter, limits, "on-time")
        clock.now += S
    for key in ("early", "on-time"):  # 9 counted, 3 more do not fit
        refused = call_costing(limiter, limits, 4, key)
        assert isinstance(refused, Refused) and refused.retry_after == 54
    clock.now = start + 62 * S - 1  # the third call leaves the window at 62 s
    assert isinstance(call_costing(limiter, limits, 4, "early"), Refused)
    clock.now = start + 62 * S
    assert call_costing(limiter, limits, 4, "on-time") == "ok"


def test_no_60_second_window_ever_holds_more_than_the_limit_of_weighted_calls(limiter, clock):
    limits = Limits(20, 0)
    rng = random.Random(5)
    accepted: list[tuple[int, int]] = []
    for _ in range(600):
        clock.now += rng.randint(50, 400)
        units = rng.choice([1, 1, 1, 2, 5, 12, 20])
        answer = call_costing(limiter, limits, units)
        if answer == "ok":
            accepted.append((clock.now, units))
        elif answer != "refused":
            accepted.append((clock.now, 1))  # admitted as one, refused the rest
    for i, (t, _) in enumerate(accepted):
        assert sum(u for x, u in accepted[i:] if x < t + 60 * S) <= 20
    assert sum(units > 1 for _, units in accepted) >= 5  # and costly calls do get through


def test_charging_nothing_or_without_a_rate_limit_records_nothing(limiter):
    limiter.acquire("k", Limits(2, 0))
    limiter.charge("k", Limits(2, 0), 0)
    limiter.charge("k", Limits(0, 5), 40)
    assert admit(limiter, Limits(2, 0)) != "refused"
    assert admit(limiter, Limits(2, 0)) == "refused"


def test_a_cost_beyond_the_whole_limit_is_the_callers_mistake(limiter):
    limiter.acquire("k", Limits(5, 0))
    with pytest.raises(ValueError, match="never fit"):
        limiter.charge("k", Limits(5, 0), 5)
    assert [admit(limiter, Limits(5, 0)) != "refused" for _ in range(5)] == [True] * 4 + [False]
