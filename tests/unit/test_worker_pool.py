"""The worker's thread pool: the most recently idle thread takes the next request."""

from __future__ import annotations

import threading
import time

import pytest

from memsvc.serving.pool import LastIdleFirstPool


@pytest.fixture
def pool():
    p = LastIdleFirstPool(4)
    yield p
    p.shutdown(wait=True)


def test_results_and_errors_come_back_through_futures(pool):
    assert pool.submit(lambda a, b: a + b, 2, 3).result(5) == 5
    assert pool.submit(lambda *, x: x * 2, x=21).result(5) == 42
    failed = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(5)


def test_one_call_at_a_time_runs_on_one_thread(pool):
    # Under light load the same (warm) thread serves every call, and no
    # other thread is started.
    threads = {pool.submit(threading.get_ident).result(5) for _ in range(50)}
    assert len(threads) == 1
    assert len(pool._threads) == 1


def test_the_thread_idle_the_shortest_time_goes_first(pool):
    gate = threading.Event()
    started = threading.Barrier(4)

    def hold():
        started.wait(5)
        gate.wait(5)
        return threading.get_ident()

    held = [pool.submit(hold) for _ in range(3)]
    started.wait(5)
    gate.set()
    idents = [f.result(5) for f in held]
    assert len(set(idents)) == 3
    time.sleep(0.05)  # all three idle again, in the order they finished
    last_idle = pool._idle[-1]
    ident = pool.submit(threading.get_ident).result(5)
    # The thread that went idle last took the call, and is idle again, last.
    assert pool._idle[-1] is last_idle
    assert ident in idents


def test_never_more_threads_than_the_maximum(pool):
    gate = threading.Event()
    running = threading.Semaphore(0)

    def hold():
        running.release()
        gate.wait(5)
        return threading.get_ident()

    futures = [pool.submit(hold) for _ in range(10)]
    for _ in range(4):
        assert running.acquire(timeout=5)
    assert not running.acquire(timeout=0.05)  # the other six wait for a thread
    assert len(pool._threads) == 4
    gate.set()
    assert len({f.result(5) for f in futures}) == 4


def test_waiting_calls_run_in_the_order_they_came():
    pool = LastIdleFirstPool(1)
    gate = threading.Event()
    order: list[int] = []
    first = pool.submit(gate.wait, 5)
    waiting = [pool.submit(order.append, i) for i in range(6)]
    gate.set()
    first.result(5)
    for f in waiting:
        f.result(5)
    pool.shutdown(wait=True)
    assert order == [0, 1, 2, 3, 4, 5]


def test_shutdown_ends_idle_threads_and_refuses_new_calls():
    pool = LastIdleFirstPool(3)
    for _ in range(3):
        pool.submit(time.sleep, 0.01)
    pool.shutdown(wait=True)
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError):
        pool.submit(print)


def test_shutdown_without_waiting_lets_running_calls_finish():
    pool = LastIdleFirstPool(1)
    gate = threading.Event()
    running = pool.submit(lambda: gate.wait(5) and "done")
    queued = pool.submit(lambda: "queued too")
    pool.shutdown(wait=False)
    gate.set()
    assert running.result(5) == "done"
    assert queued.result(5) == "queued too"
    pool._threads[0].join(5)
    assert not pool._threads[0].is_alive()


def test_cancelled_calls_do_not_run():
    pool = LastIdleFirstPool(1)
    gate = threading.Event()
    ran = []
    pool.submit(gate.wait, 5)
    waiting = pool.submit(ran.append, 1)
    assert waiting.cancel()
    gate.set()
    pool.submit(ran.append, 2).result(5)
    pool.shutdown(wait=True)
    assert ran == [2]


def test_a_worker_uses_it(tmp_path):
    from memsvc.serving.worker import JSONErrorThreadWorker

    class Cfg:
        threads = 3

    worker = JSONErrorThreadWorker.__new__(JSONErrorThreadWorker)
    worker.cfg = Cfg()
    pool = worker.get_thread_pool()
    try:
        assert isinstance(pool, LastIdleFirstPool)
        assert pool.max_workers == 3
    finally:
        pool.shutdown()


def test_the_workers_long_lived_objects_are_kept_out_of_collections(tmp_path):
    """gunicorn's hooks freeze the master's objects before forking and the worker's once ready."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import gc, types
        from memsvc.serving import config
        before = gc.get_freeze_count()
        config.pre_fork(None, None)
        forked = gc.get_freeze_count()
        made_by_the_worker = [[i] for i in range(1000)]
        config.post_worker_init(types.SimpleNamespace(wsgi=types.SimpleNamespace()))
        print(before, forked > before, gc.get_freeze_count() >= forked + 1000)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")}
    env["MEMSVC_DATABASE"] = str(tmp_path / "m.sqlite3")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["0", "True", "True"]
