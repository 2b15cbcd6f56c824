"""What of gunicorn memsvc's worker (memsvc/serving/worker.py) builds on.

The worker overrides public methods of gunicorn's gthread worker and uses
its connections' attributes; none of gunicorn's private names. Those are
gunicorn 27's, as setup.cfg requires: on a gunicorn without them, this
fails naming each one, rather than the worker failing request by request.
Nothing here imports memsvc, so it runs on any gunicorn.
"""

import inspect
import os
import socket

import gunicorn
from gunicorn.config import Config
from gunicorn.http.unreader import Unreader
from gunicorn.workers import gthread
from gunicorn.workers.gthread import ThreadWorker


def test_gunicorn_has_the_thread_worker_memsvcs_worker_builds_on():
    missing = []
    methods = {
        "handle": ["self", "conn"],
        "handle_request": ["self", "req", "conn"],
        "finish_request": ["self", "conn", "fs"],
        "handle_error": ["self", "req", "client", "addr", "exc"],
        "enqueue_req": ["self", "conn"],
        "murder_pending": ["self"],
        "init_process": ["self"],
        "get_thread_pool": ["self"],
    }
    for name, params in methods.items():
        method = getattr(ThreadWorker, name, None)
        if method is None or list(inspect.signature(method).parameters) != params:
            missing.append(f"ThreadWorker.{name}({', '.join(params[1:])})")
    if "self.murder_pending()" not in inspect.getsource(ThreadWorker.run):
        missing.append("ThreadWorker.run calling murder_pending() each round")
    worker = ThreadWorker(0, os.getppid(), [], None, 30, Config(), None)
    worker.tmp.close()  # the heartbeat file every worker makes
    attributes = ("poller", "nr_conns", "alive")
    missing += [f"ThreadWorker.{a}" for a in attributes if not hasattr(worker, a)]
    ours, theirs = socket.socketpair()
    try:
        conn = gthread.TConn(Config(), ours, ("127.0.0.1", 1), ("127.0.0.1", 2))
        attributes = ("sock", "client", "parser", "timeout", "data_ready", "is_http2", "init")
        missing += [f"TConn.{a}" for a in attributes if not hasattr(conn, a)]
    finally:
        ours.close()
        theirs.close()
    missing += [f"Unreader.{a}" for a in ("take_buffered", "unread") if not hasattr(Unreader, a)]
    assert not missing, (
        f"gunicorn {gunicorn.__version__} lacks what memsvc/serving/worker.py builds on: "
        f"{', '.join(missing)}; setup.cfg names the gunicorn it is written for"
    )
