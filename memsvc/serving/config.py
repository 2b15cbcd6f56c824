"""gunicorn settings for memsvc.

Used by ``gunicorn wsgi:app`` (through ``gunicorn.conf.py`` at the top of
the repository) and by ``memsvc run``. The address, workers and threads are
memsvc settings (``MEMSVC_BIND``, ``WEB_CONCURRENCY``, ``MEMSVC_THREADS``),
checked like every other: a bad one stops start-up with one line. Anything
else can be overridden with gunicorn's own flags or ``GUNICORN_CMD_ARGS``.
"""

from __future__ import annotations

import errno
import gc
import multiprocessing
import os
import socket
import typing as t

from .. import settings as _settings
from ..errors import ConfigError
from ..observability import metrics
from ..search.snapshot_dir import clear_snapshots
from ..search.snapshot_dir import shared_dir

__all__ = [
    "bind", "workers", "threads", "worker_class", "access_log_format", "timeout",
    "graceful_timeout", "keepalive", "preload_app", "limit_request_line",
    "limit_request_field_size", "accesslog", "errorlog", "control_socket_disable",
    "on_starting", "pre_fork", "post_worker_init", "when_ready", "child_exit", "on_exit",
]  # fmt: skip

# Without a query string: tRPC queries carry their input, user ids and
# search text included, in the URL. MEMSVC_LOG_FULL_URLS=true logs it all.
ACCESS_LOG_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(a)s"'
ACCESS_LOG_FORMAT_FULL = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'


def options(values: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """gunicorn's settings for these memsvc settings."""
    return {
        "bind": [values["BIND"]],
        # One process per core runs the embedding model and SQLite in parallel.
        "workers": values["WORKERS"] or multiprocessing.cpu_count(),
        # Threads, not more processes, for waiting: a call to a remote
        # embedding provider spends most of its time waiting on the network,
        # and SQLite and numpy release the GIL. Each thread keeps its own
        # SQLite connection.
        "threads": values["THREADS"],
        "worker_class": "memsvc.serving.worker.JSONErrorThreadWorker",
        "access_log_format": (
            ACCESS_LOG_FORMAT_FULL if values["LOG_FULL_URLS"] else ACCESS_LOG_FORMAT
        ),
    }


def check_address_free(address: str) -> None:
    """Fail with one line naming MEMSVC_BIND if ``address`` cannot be listened on.

    gunicorn would retry for five seconds and then log several lines.
    """
    if address.startswith("unix:") or address.startswith("fd://"):
        return
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as e:
        raise ConfigError(f"MEMSVC_BIND {address!r} cannot be used: {e}") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        # As gunicorn binds: a port in TIME_WAIT is free, one being listened on is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"MEMSVC_BIND {address!r}: the address is already in use "
                    "(another server listens there; choose another port)"
                ) from None
            raise ConfigError(f"MEMSVC_BIND {address!r} cannot be used: {e.strerror}") from None


def thread_warning(
    workers: int, threads: int, concurrency_limit: int, tenant_limit: int = 0
) -> str | None:
    """A warning when one API key, or one tenant, at its concurrency limit could occupy every
    thread."""
    for setting, limit, who in (
        ("MEMSVC_CONCURRENCY_LIMIT", concurrency_limit, "one API key"),
        ("MEMSVC_TENANT_CONCURRENCY_LIMIT", tenant_limit, "one tenant"),
    ):
        if limit and workers * threads <= limit:
            return (
                f"memsvc: warning: {workers} worker(s) x {threads} threads = {workers * threads} "
                f"threads, not above {setting} ({limit}): {who} at its limit can keep every "
                f"other caller waiting; raise MEMSVC_THREADS or WEB_CONCURRENCY, or lower {setting}"
            )
    return None


def on_starting(server: t.Any) -> None:
    warning = thread_warning(
        server.cfg.workers,
        server.cfg.threads,
        _values["CONCURRENCY_LIMIT"],
        _values["TENANT_CONCURRENCY_LIMIT"],
    )
    if warning:
        server.log.warning(warning)
    try:
        for address in server.cfg.bind:
            check_bind(address)
    except ConfigError as e:
        raise SystemExit(f"memsvc: {e}") from None
    # Snapshot files of an earlier run may be of another database (one
    # restored from a backup, say): the workers write their own.
    clear_snapshots(shared_dir(_values, _settings.default_instance_path()))


def check_bind(address: str) -> None:
    """:func:`check_address_free`, unless the sockets are handed over (nothing to bind)."""
    if os.environ.get("LISTEN_FDS") or os.environ.get("GUNICORN_FD"):
        return  # systemd's socket activation, or gunicorn's own re-exec
    check_address_free(address)


def when_ready(server: t.Any) -> None:
    if _metrics_dir is not None:
        server.log.info("memsvc: metric files in %s (removed when the server stops)", _metrics_dir)
    if _values["METRICS_BIND"]:
        from .metrics_server import start

        start(_values["METRICS_BIND"], _values["METRICS_TOKEN"], server.log)


def child_exit(server: t.Any, worker: t.Any) -> None:
    # Its counters stay counted; its gauges go.
    metrics.worker_exited(worker.pid)


def on_exit(server: t.Any) -> None:
    if _metrics_dir is not None:
        metrics.remove_multiprocess_dir(_metrics_dir)


def pre_fork(server: t.Any, worker: t.Any) -> None:
    # What the master loaded (the app, its modules) lives as long as the
    # workers: kept out of the collector's sweeps, a worker's collections
    # never touch those objects, so their pages stay shared with the master.
    gc.freeze()


def post_worker_init(worker: t.Any) -> None:
    runtime = getattr(worker.wsgi, "extensions", {}).get("memsvc")
    if runtime is not None:
        # Load the embedding model now rather than on the first request.
        runtime.embedder.warm_up()
        # Threads do not survive gunicorn's fork: each worker starts its own.
        runtime.start_maintenance()
        # Extraction jobs run in every worker (none without a language model).
        runtime.start_extraction()
    # The worker's own long-lived objects (the model, its connections) too:
    # a full collection then sweeps only what requests made, not the whole
    # heap (14 ms each time, once the app and the model are loaded).
    gc.freeze()


try:
    _values, _ = _settings.load(_settings.default_instance_path())
except ConfigError as _e:
    raise SystemExit(f"memsvc: {_e}") from None

_options = options(_values)

# Prometheus metrics: each worker counts in files of its own, in a folder
# made for this server start, named before the app (and prometheus_client)
# is loaded, and removed when the server stops (on_exit).
_metrics_dir = metrics.prepare_multiprocess_dir() if metrics.enabled(_values) else None
bind = _options["bind"]
workers = _options["workers"]
threads = _options["threads"]
worker_class = _options["worker_class"]
access_log_format = _options["access_log_format"]

# Above the embedding client's own deadline (timeout x attempts + backoff,
# 38 s with the defaults), so a slow provider is reported as an error to
# the caller instead of the worker being killed mid-request.
timeout = 60
graceful_timeout = 30
keepalive = 5

# Load the app once in the master: a bad setting stops start-up with one
# line instead of every worker failing, and workers share the loaded code.
# The app opens no database connection and loads no model weights before
# the fork.
preload_app = True

# tRPC queries carry their input in the URL, and gunicorn's default request
# line limit (4094 bytes) is easily hit by a search or a batch. 0 lifts the
# limit.
limit_request_line = 0

# Identity providers' tokens with many claims can exceed gunicorn's default
# 8 KiB per header, which it would refuse with an HTML 431.
limit_request_field_size = 32768

# memsvc writes its own access line (memsvc.observability.requests): with
# the request id, duration, procedures, error codes, key id and tenant.
accesslog = None
errorlog = "-"

# gunicorn 24+ opens a control socket at one fixed path per user, so a
# second server on the same box (another memsvc, a test run) would clash.
control_socket_disable = True
