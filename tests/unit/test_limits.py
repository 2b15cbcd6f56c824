"""The per-key limiter: exact rolling windows, slots that cannot leak, no global lock."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from memsvc.limits import Limiter
from memsvc.limits import Limits
from memsvc.limits import Refused
from memsvc.limits import _locked

S = 1000  # ms


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def limiter(tmp_path, clock):
    return Limiter(str(tmp_path / "limits"), clock=clock)


def admit(limiter, limits, key="k"):
    try:
        return limiter.acquire(key, limits)
    except Refused:
        return "refused"


RATE_ONLY = Limits(100, 0)


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
    with pytest.raises(Refused, match="Rate limit exceeded: 1 requests per minute") as e:
        limiter.acquire("k", limits)
    assert e.value.retry_after == 45


def test_concurrency_slots_are_held_until_released(limiter):
    limits = Limits(0, 10)
    tokens = [limiter.acquire("k", limits) for _ in range(10)]
    assert limiter.executing("k") == 10
    with pytest.raises(Refused, match="at most 10 at once") as e:
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


def test_expired_slots_free_themselves(limiter, clock):
    limits = Limits(0, 2)
    limiter.acquire("k", limits)
    limiter.acquire("k", limits)
    assert admit(limiter, limits) == "refused"
    clock.now += limiter.slot_ttl_ms
    assert admit(limiter, limits) != "refused"


def _hold_slots_and_die(directory, count, ready):
    limiter = Limiter(directory)
    for _ in range(count):
        limiter.acquire("k", Limits(0, count))
    ready.set()
    time.sleep(60)


def test_slots_of_a_killed_worker_are_reclaimed(tmp_path):
    directory = str(tmp_path / "limits")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    worker = ctx.Process(target=_hold_slots_and_die, args=(directory, 10, ready))
    worker.start()
    assert ready.wait(30)
    limiter = Limiter(directory)
    assert admit(limiter, Limits(0, 10)) == "refused"
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    assert admit(limiter, Limits(0, 10)) != "refused"
    assert limiter.executing("k") == 1


def _hammer(directory, attempts, start, results):
    limiter = Limiter(directory, clock=lambda: 5_000_000)
    start.wait()
    accepted = sum(admit(limiter, Limits(100, 0)) != "refused" for _ in range(attempts))
    results.put(accepted)


def test_processes_together_never_exceed_the_limit(tmp_path):
    directory = str(tmp_path / "limits")
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(directory, 60, start, results)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    total = sum(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join()
    assert total == 100


def test_threads_together_never_exceed_the_limit(tmp_path):
    limiter = Limiter(str(tmp_path / "limits"), clock=lambda: 5_000_000)
    accepted = []
    barrier = threading.Barrier(8)

    def run():
        barrier.wait()
        accepted.append(sum(admit(limiter, Limits(100, 5)) not in ("refused",) for _ in range(40)))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # Nothing is released, so concurrency (5) binds before the rate does.
    assert sum(accepted) == 5


def _lock_key_a(directory, locked, release):
    limiter = Limiter(directory)
    limiter.acquire("a", Limits(5, 5))
    with _locked(limiter._state("a")):
        locked.set()
        release.wait(30)


def test_a_busy_key_does_not_hold_up_another(tmp_path):
    directory = str(tmp_path / "limits")
    ctx = multiprocessing.get_context("spawn")
    locked, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_lock_key_a, args=(directory, locked, release))
    holder.start()
    try:
        assert locked.wait(30)
        limiter = Limiter(directory)
        started = time.monotonic()
        limiter.acquire("b", Limits(5, 5))
        assert time.monotonic() - started < 1
        blocked = threading.Thread(target=lambda: limiter.acquire("a", Limits(5, 5)))
        blocked.start()
        blocked.join(0.5)
        assert blocked.is_alive()  # key a waits for its own lock only
    finally:
        release.set()
        holder.join()
    blocked.join(10)
    assert not blocked.is_alive()


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


def test_a_damaged_state_file_is_rebuilt(limiter, tmp_path):
    limiter.acquire("k", Limits(5, 5))
    path = tmp_path / "limits" / "k"
    path.write_bytes(b"garbage" * 10)
    fresh = Limiter(str(tmp_path / "limits"))
    assert fresh.acquire("k", Limits(5, 5)) is not None


def test_times_from_before_a_reboot_are_forgotten(tmp_path):
    directory = str(tmp_path / "limits")
    before = Limiter(directory, clock=lambda: 10_000_000)
    for _ in range(5):
        before.acquire("k", Limits(5, 0))
    after = Limiter(directory, clock=lambda: 1_000)  # the monotonic clock restarted
    assert admit(after, Limits(5, 0)) != "refused"
