"""What the console's sign-in limit keeps per client address, and for how long."""

import fcntl
import os
import threading
import time

import pytest

from memsvc.housekeeping import Maintenance
from memsvc.limits import EPHEMERAL
from memsvc.limits import IDLE_MS
from memsvc.limits import Limiter
from memsvc.limits import Limits
from memsvc.limits import Refused
from tests.http.test_console_http import sign_in

ADDRESSES = [f"203.0.113.{i}" for i in range(1, 41)]
#: Two windows of the limiter: what PostgreSQL's sweep waits before removing a key's rows.
LATER_MS = 121_000


def kept(app, store_kind) -> int:
    """How many sign-in keys the limiter holds state for: files, or PostgreSQL rows."""
    backend = app.extensions["memsvc"].backend
    if store_kind == "sqlite":
        folder = backend.limiter.directory
        return sum("console-sign-in" in name for name in os.listdir(folder))
    with backend.db.pooled() as conn:
        (rows,) = conn.execute(
            "SELECT count(*) FROM memsvc_limit_keys WHERE key_id LIKE '%console-sign-in%'"
        ).fetchone()
        conn.rollback()
    return int(rows)


def test_sign_in_attempts_from_many_addresses_leave_nothing_behind(make_app, store_kind):
    app = make_app()
    backend = app.extensions["memsvc"].backend
    for address in ADDRESSES:
        attempt = sign_in(app.test_client(), "sk_memsvc_" + "0" * 64,
                          environ_base={"REMOTE_ADDR": address})  # fmt: skip
        assert attempt.status_code == 401
    assert kept(app, store_kind) == len(ADDRESSES)
    housekeeping = Maintenance(backend, None, 60)
    housekeeping.once()
    assert kept(app, store_kind) == len(ADDRESSES)  # still counting this minute
    # Two minutes on, the next round of housekeeping removes them all.
    limiter = backend.limiter
    if store_kind == "sqlite":
        now = limiter.clock()
        limiter.clock = lambda: now + LATER_MS
    else:
        now = int(time.time() * 1000)
        limiter.clock = lambda: now + LATER_MS
    housekeeping.once()
    assert kept(app, store_kind) == 0
    # An address seen again is counted afresh, as any new one.
    again = sign_in(app.test_client(), "sk_memsvc_" + "0" * 64,
                    environ_base={"REMOTE_ADDR": ADDRESSES[0]})  # fmt: skip
    assert again.status_code == 401
    assert kept(app, store_kind) == 1


def test_the_sign_in_limit_still_holds_across_a_sweep(make_app):
    app = make_app(CONSOLE_SIGNIN_PER_MINUTE=3)
    backend = app.extensions["memsvc"].backend
    client = app.test_client()
    for _ in range(2):
        assert sign_in(client, "sk_memsvc_wrong").status_code == 401
    Maintenance(backend, None, 60).once()  # within the minute: nothing is forgotten
    assert sign_in(client, "sk_memsvc_wrong").status_code == 401
    assert sign_in(client, "sk_memsvc_wrong").status_code == 429


def test_a_file_swept_while_a_call_waits_for_it_is_opened_again(tmp_path):
    """A call that opened a key's file just before a sweep removed it counts in the new file."""
    clock = [10_000_000]
    limiter = Limiter(str(tmp_path / "limits"), clock=lambda: clock[0])
    key, limits = EPHEMERAL + "address", Limits(2, 0)
    limiter.acquire(key, limits)
    path = os.path.join(limiter.directory, key)
    clock[0] += IDLE_MS
    # The sweep's part, by hand: the file locked, a call arriving meanwhile.
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    waiting = threading.Thread(target=limiter.acquire, args=(key, limits))
    waiting.start()
    time.sleep(0.2)  # it opens the file, and waits for the lock
    os.unlink(path)
    os.close(fd)
    waiting.join(10)
    # Its call is in the file now at the path: one more fits, then none.
    limiter.acquire(key, limits)
    with pytest.raises(Refused):
        limiter.acquire(key, limits)
