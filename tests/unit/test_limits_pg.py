"""The PostgreSQL limiter: the per-key limiter's answers, shared by every app server.

What every limiter answers is in test_limiter_contract.py, run on this one
too; here is what PostgreSQL adds: rows, holders on several hosts, and two
servers (limiters with different holders) sharing one set of limits.
"""

import contextlib
import hashlib
import multiprocessing
import os
import signal
import socket
import subprocess
import threading
import time

import psycopg
import pytest
from psycopg import pq
from psycopg_pool import ConnectionPool

from memsvc.limits import Limits
from memsvc.limits import Refused
from memsvc.store.postgres.limits import PgLimiter
from memsvc.store.postgres.limits import install
from tests.support.limiting import Clock
from tests.support.limiting import S
from tests.support.limiting import admit
from tests.support.postgres import drop_database
from tests.support.postgres import fresh_database

pytestmark = pytest.mark.stores("postgres")


@pytest.fixture
def pg_url(request):
    """A fresh, empty database for this test, dropped after it."""
    url = fresh_database(request.node.name)
    yield url
    drop_database(url)


@pytest.fixture
def db(pg_url):
    """The fresh database with the limiter's tables and functions."""
    with psycopg.connect(pg_url) as conn:
        install(conn)
    return pg_url


def open_pool(url, size=4, **kwargs):
    return ConnectionPool(url, min_size=1, max_size=size, open=True, kwargs=kwargs)


@pytest.fixture
def pool(db):
    with open_pool(db, size=8) as p:
        yield p


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def limiter(pool, clock):
    return PgLimiter(pool.connection, clock=clock)


def rows(url, table, key=None):
    with psycopg.connect(url) as conn:
        if key is None:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return conn.execute(f"SELECT count(*) FROM {table} WHERE key_id = %s", [key]).fetchone()[0]


def held_slots(url, key):
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT count(*) FROM memsvc_limit_slots WHERE key_id = %s AND holder IS NOT NULL",
            [key],
        ).fetchone()[0]


def test_refused_calls_write_no_rows(limiter, clock, db):
    limits = Limits(2, 0)
    admit(limiter, limits)
    clock.now += 1
    admit(limiter, limits)
    for _ in range(50):
        clock.now += 100
        assert admit(limiter, limits) == "refused"
    assert rows(db, "memsvc_limit_calls") == 2


def test_any_text_is_a_key_id(limiter):
    tenant = "tenant-" + hashlib.sha256(b"tenant-A").hexdigest()[:32]  # the keys router's
    keys = [tenant, "", "ключ ✓", "it's; DROP TABLE x --", "%s %(x)s \\", "k" * 2000]
    for key in keys:
        assert admit(limiter, Limits(2, 1), key) != "refused"
        assert admit(limiter, Limits(2, 1), key) == "refused"  # its slot is held
    assert all(limiter.executing(key) == 1 for key in keys)


def test_zero_means_unlimited_and_asks_no_database():
    def no_database():
        raise AssertionError("the database was asked")

    limiter = PgLimiter(no_database)
    assert all(limiter.acquire("k", Limits(0, 0)) is None for _ in range(1000))
    limiter.release("k", None)


def test_a_slot_records_its_holder_and_expiry(limiter, clock, db):
    assert limiter.holder == f"{socket.gethostname()}:{os.getpid()}"
    limiter.acquire("k", Limits(0, 1))
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT holder, expires_ms FROM memsvc_limit_slots").fetchone()
    assert row == (limiter.holder, clock.now + limiter.slot_ttl_ms)


def _hold_slots_and_die(url, count, ready):
    with open_pool(url, size=1) as pool:
        limiter = PgLimiter(pool.connection)
        for _ in range(count):
            limiter.acquire("k", Limits(0, count))
        ready.set()
        time.sleep(60)


def test_slots_of_a_killed_worker_on_this_host_are_reclaimed(pool, db):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    worker = ctx.Process(target=_hold_slots_and_die, args=(db, 10, ready))
    worker.start()
    try:
        assert ready.wait(30)
        limiter = PgLimiter(pool.connection)
        assert limiter.executing("k") == 10
        assert admit(limiter, Limits(0, 10)) == "refused"
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.join()
    assert limiter.executing("k") == 0
    assert admit(limiter, Limits(0, 10)) != "refused"
    assert limiter.executing("k") == 1
    assert held_slots(db, "k") == 1  # the dead worker's are free


def test_a_dead_holder_on_another_host_frees_its_slots_at_expiry(pool, clock):
    dead_pid = _a_pid_that_does_not_exist()
    # A holder of another box with a pid that is not running here: this box
    # cannot tell whether it lives, so its slots count until they expire.
    elsewhere = PgLimiter(pool.connection, holder=f"elsewhere:{dead_pid}", clock=clock)
    here = PgLimiter(pool.connection, clock=clock)
    for _ in range(2):
        elsewhere.acquire("k", Limits(0, 2))
    assert here.executing("k") == 2
    assert admit(here, Limits(0, 2)) == "refused"
    clock.now += elsewhere.slot_ttl_ms
    assert admit(here, Limits(0, 2)) != "refused"
    # The same pid named as a holder of this host is known to be dead.
    gone = PgLimiter(pool.connection, holder=f"{socket.gethostname()}:{dead_pid}", clock=clock)
    gone.acquire("j", Limits(0, 1))
    assert here.executing("j") == 0
    assert admit(here, Limits(0, 1), "j") != "refused"


def _a_pid_that_does_not_exist():
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)
    return child.pid


def _hammer(url, attempts, start, results):
    with open_pool(url, size=1) as pool:
        limiter = PgLimiter(pool.connection)  # the database's clock
        pool.wait()
        start.wait()
        rate = concurrent = 0
        for _ in range(attempts):
            rate += admit(limiter, Limits(100, 0), "rate") != "refused"
            concurrent += admit(limiter, Limits(0, 7), "concurrent") != "refused"
        results.put((rate, concurrent))


def test_processes_together_never_exceed_the_limit(db):
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(db, 60, start, results)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    answers = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join()
    # 240 attempts each, within a minute; nothing released.
    assert sum(rate for rate, _ in answers) == 100
    assert sum(concurrent for _, concurrent in answers) == 7


def test_threads_together_never_exceed_the_limit(pool):
    limiter = PgLimiter(pool.connection, clock=lambda: 5_000_000)
    accepted = []
    barrier = threading.Barrier(8)

    def run():
        barrier.wait()
        both = rate = 0
        for _ in range(40):
            both += admit(limiter, Limits(100, 5), "both") != "refused"
            rate += admit(limiter, Limits(100, 0), "rate") != "refused"
        accepted.append((both, rate))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # Nothing is released, so concurrency (5) binds before the rate does.
    assert sum(both for both, _ in accepted) == 5
    assert limiter.executing("both") == 5
    assert sum(rate for _, rate in accepted) == 100


def test_a_busy_key_does_not_hold_up_another(pool, db):
    limiter = PgLimiter(pool.connection)
    with psycopg.connect(db) as busy:
        # An acquire of key a inside a transaction left open holds a's lock.
        busy.execute("SELECT * FROM memsvc_limit_acquire('a', 5, 5, 'busy:1', NULL, 60000)")
        started = time.monotonic()
        limiter.acquire("b", Limits(5, 5))
        assert time.monotonic() - started < 1
        blocked = threading.Thread(target=lambda: limiter.acquire("a", Limits(5, 5)))
        blocked.start()
        blocked.join(0.5)
        assert blocked.is_alive()  # key a waits for its own lock only
        busy.commit()
        blocked.join(10)
        assert not blocked.is_alive()
    assert limiter.executing("a") == 2


def test_a_rate_limit_lowered_and_raised_again_still_counts_every_call(limiter, clock):
    """The file limiter keeps only as many times as the lowest limit since (noted in docs)."""
    for _ in range(10):
        clock.now += 1
        limiter.acquire("k", Limits(10, 0))
    assert admit(limiter, Limits(3, 0)) == "refused"
    assert admit(limiter, Limits(10, 0)) == "refused"
    clock.now += 60 * S
    assert admit(limiter, Limits(10, 0)) != "refused"


def test_two_servers_share_one_set_of_limits(db, clock):
    with open_pool(db) as pool_a, open_pool(db) as pool_b:
        a = PgLimiter(pool_a.connection, holder="server-a:1", clock=clock)
        b = PgLimiter(pool_b.connection, holder="server-b:1", clock=clock)
        for i in range(10):
            clock.now += 1
            assert admit(a if i % 2 else b, Limits(10, 0)) != "refused"
        assert admit(a, Limits(10, 0)) == "refused"
        assert admit(b, Limits(10, 0)) == "refused"

        held = [a.acquire("c", Limits(0, 3)), a.acquire("c", Limits(0, 3))]
        held.append(b.acquire("c", Limits(0, 3)))
        assert a.executing("c") == b.executing("c") == 3
        assert admit(a, Limits(0, 3), "c") == "refused"
        assert admit(b, Limits(0, 3), "c") == "refused"
        a.release("c", held[0])
        assert admit(b, Limits(0, 3), "c") != "refused"
        assert admit(a, Limits(0, 3), "c") == "refused"


def test_a_clock_set_back_a_little_lets_no_extra_call_in(limiter, clock):
    limits = Limits(2, 0)
    admit(limiter, limits)
    clock.now += 1
    admit(limiter, limits)
    first = clock.now - 1
    clock.now = first - 10 * S
    with pytest.raises(Refused) as e:
        limiter.acquire("k", limits)
    assert e.value.retry_after == 70  # in real time, from the clock's new reading
    clock.now = first + 60 * S - 1
    assert admit(limiter, limits) == "refused"
    clock.now = first + 60 * S
    assert admit(limiter, limits) != "refused"


def test_times_from_a_clock_far_ahead_are_forgotten(pool):
    before = PgLimiter(pool.connection, clock=lambda: 10_000_000)
    for _ in range(5):
        before.acquire("k", Limits(5, 0))
    after = PgLimiter(pool.connection, clock=lambda: 1_000)  # the clock was set back
    assert admit(after, Limits(5, 0)) != "refused"


def test_calls_that_left_the_window_are_deleted(limiter, clock, db):
    for _ in range(400):
        clock.now += 500
        limiter.acquire("k", Limits(1000, 0))
    # One call every half second: the last minute's 120, and the one that
    # admitted the last call (not yet 60 s old when it was deleted from).
    assert 120 <= rows(db, "memsvc_limit_calls", "k") <= 121


def test_a_costly_calls_units_are_rows_and_a_refused_charge_writes_none(limiter, clock, db):
    limits = Limits(10, 0)
    limiter.acquire("k", limits)
    limiter.charge("k", limits, 5)
    assert rows(db, "memsvc_limit_calls", "k") == 6
    limiter.acquire("k", limits)
    with pytest.raises(Refused):
        limiter.charge("k", limits, 5)
    assert rows(db, "memsvc_limit_calls", "k") == 7


def test_costly_calls_that_left_the_window_are_deleted(limiter, clock, db):
    limits = Limits(100, 0)
    for _ in range(400):
        clock.now += 2 * S
        limiter.acquire("k", limits)
        limiter.charge("k", limits, 2)
    # Three units every 2 s: the last minute's 90, and those of the call
    # that admitted the last (not yet 60 s old when it was deleted from).
    assert 90 <= rows(db, "memsvc_limit_calls", "k") <= 93


def test_a_sweep_deletes_the_rows_of_idle_keys(limiter, clock, db):
    start = clock.now
    for _ in range(5):
        limiter.acquire("idle", Limits(10, 0))
    for _ in range(2):
        stale = limiter.acquire("idle", Limits(0, 2))  # never released; expire at start + 120 s
    clock.now = start + 100 * S
    limiter.acquire("active", Limits(10, 0))
    clock.now = start + 120 * S - 1
    assert limiter.sweep() == 0  # nothing two windows old, no slot a minute past expiry
    clock.now = start + 180 * S
    assert limiter.sweep() == 5 + 2
    assert rows(db, "memsvc_limit_calls", "active") == 1
    assert rows(db, "memsvc_limit_slots") == rows(db, "memsvc_limit_keys", "idle") == 0
    # The key starts afresh; a token from before the sweep frees nothing.
    assert all(admit(limiter, Limits(10, 2), "idle") != "refused" for _ in range(2))
    limiter.release("idle", stale)
    assert limiter.executing("idle") == 2


def test_a_late_release_does_not_free_the_slots_next_holder(limiter, clock):
    late = limiter.acquire("k", Limits(0, 1))
    clock.now += limiter.slot_ttl_ms  # the call outlived its slot
    current = limiter.acquire("k", Limits(0, 1))
    assert current[0] == late[0]  # the same slot, reused
    limiter.release("k", late)
    assert limiter.executing("k") == 1
    assert admit(limiter, Limits(0, 1)) == "refused"
    limiter.release("k", current)
    assert limiter.executing("k") == 0


def test_slots_are_reused_and_calls_deleted_as_they_go(limiter, clock, db):
    for _ in range(300):
        clock.now += 1 * S
        limiter.release("k", limiter.acquire("k", Limits(100, 3)))
    assert rows(db, "memsvc_limit_slots", "k") == 1  # never more than one held at once
    assert 60 <= rows(db, "memsvc_limit_calls", "k") <= 60 + 2  # a minute's calls


def test_a_keys_row_lost_is_rebuilt_from_its_calls(limiter, clock, db):
    for _ in range(3):
        clock.now += 1
        limiter.acquire("k", Limits(3, 0))
    with psycopg.connect(db) as conn:
        conn.execute("DELETE FROM memsvc_limit_keys")
    assert admit(limiter, Limits(3, 0)) == "refused"
    clock.now += 60 * S
    assert admit(limiter, Limits(3, 0)) != "refused"
    assert admit(limiter, Limits(3, 0)) != "refused"


@contextlib.contextmanager
def _the(conn):
    yield conn


@pytest.mark.parametrize("autocommit", [True, False])
def test_each_call_commits_and_leaves_no_transaction_open(db, autocommit):
    with psycopg.connect(db, autocommit=autocommit) as conn, psycopg.connect(db) as other:
        limiter = PgLimiter(lambda: _the(conn))
        onlooker = PgLimiter(lambda: _the(other))
        token = limiter.acquire("k", Limits(5, 5))
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert conn.autocommit is autocommit
        assert onlooker.executing("k") == 1  # committed: another connection sees it
        other.commit()
        limiter.release("k", token)
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert onlooker.executing("k") == 0
        assert limiter.executing("k") == 0
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert conn.autocommit is autocommit


def test_a_connection_inside_a_transaction_is_refused(db):
    with psycopg.connect(db) as conn:
        conn.execute("SELECT 1")  # opens a transaction
        limiter = PgLimiter(lambda: _the(conn))
        with pytest.raises(RuntimeError, match="not one inside a transaction"):
            limiter.acquire("k", Limits(5, 5))
        conn.rollback()
        assert limiter.acquire("k", Limits(5, 5)) is not None


def test_another_isolation_level_is_refused_loudly(db):
    # Its snapshot would be taken before the key's lock: stale counts.
    with psycopg.connect(db, options="-c default_transaction_isolation=serializable") as conn:
        limiter = PgLimiter(lambda: _the(conn))
        with pytest.raises(psycopg.errors.RaiseException, match="need READ COMMITTED"):
            limiter.acquire("k", Limits(5, 5))
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert rows(db, "memsvc_limit_calls") == rows(db, "memsvc_limit_slots") == 0


def test_installing_twice_changes_nothing(pool, db, clock):
    limiter = PgLimiter(pool.connection, clock=clock)
    limiter.acquire("k", Limits(1, 1))
    with psycopg.connect(db) as conn:
        install(conn)
    assert admit(limiter, Limits(1, 1)) == "refused"
    assert limiter.executing("k") == 1
