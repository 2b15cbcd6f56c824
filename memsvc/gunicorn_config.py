"""gunicorn settings for memsvc.

Used by ``gunicorn wsgi:app`` (through ``gunicorn.conf.py`` at the top of
the repository) and by ``memsvc run``. Override with gunicorn's own flags
or ``GUNICORN_CMD_ARGS``; ``WEB_CONCURRENCY`` sets the worker count.
"""

import multiprocessing
import os

bind = [os.environ.get("MEMSVC_BIND", "127.0.0.1:8000")]

# One process per core runs the embedding model and SQLite in parallel.
workers = int(os.environ.get("WEB_CONCURRENCY") or multiprocessing.cpu_count())

# Threads, not more processes, for waiting: a call to a remote embedding
# provider spends most of its time waiting on the network, and SQLite and
# numpy release the GIL. Each thread keeps its own SQLite connection.
worker_class = "memsvc.gunicorn_worker.JSONErrorThreadWorker"
threads = int(os.environ.get("MEMSVC_THREADS") or 4)

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
# limit to gunicorn's internal cap of 1 MiB, the same as memsvc's body limit.
limit_request_line = 0

# Identity providers' tokens with many claims can exceed gunicorn's default
# 8 KiB per header, which it would refuse with an HTML 431.
limit_request_field_size = 32768

accesslog = "-"
errorlog = "-"

# gunicorn 24+ opens a control socket at one fixed path per user, so a
# second server on the same box (another memsvc, a test run) would clash.
control_socket_disable = True


def post_worker_init(worker):
    # Load the embedding model now rather than on the first request.
    runtime = getattr(worker.wsgi, "extensions", {}).get("memsvc")
    if runtime is not None:
        runtime.embedder.warm_up()
