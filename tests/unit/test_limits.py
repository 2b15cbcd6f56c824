"""The per-key limiter of one box: slots that cannot leak, no global lock, files that heal.

What every limiter answers (windows, slots, messages) is in
test_limiter_contract.py.
"""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from memsvc.limits import Limiter
from memsvc.limits import Limits
from memsvc.limits import key_file
from tests.support.limiting import Clock
from tests.support.limiting import admit


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def limiter(tmp_path, clock):
    return Limiter(str(tmp_path / "limits"), clock=clock)


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
    with key_file.locked(limiter._state("a")):
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
