"""``MEMSVC_METRICS_BIND``: /metrics on an address of its own, served by gunicorn's master.

The master reads every worker's metric files (see
:mod:`memsvc.observability.metrics`), so a scrape here sees the whole
server, and keeps answering while workers restart. It answers ``GET
/metrics`` (with the bearer token when ``MEMSVC_METRICS_TOKEN`` is set) and
``404`` to anything else.

Each connection gets a thread of its own, and a deadline: a client that
connects and sends nothing, or a byte now and then, holds only its own
thread, for :data:`TIMEOUT` seconds at most, and never delays a scrape.
At most :data:`MAX_CONNECTIONS` are served at once; one more is closed at
once, unanswered.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import typing as t
from wsgiref.simple_server import WSGIRequestHandler
from wsgiref.simple_server import WSGIServer
from wsgiref.simple_server import make_server

from ..errors import ErrorEnvelope
from ..observability import metrics

#: Seconds a connection may take to send its request and read the answer.
TIMEOUT = 10.0
#: Connections served at once.
MAX_CONNECTIONS = 16


class _Quiet(WSGIRequestHandler):
    timeout = TIMEOUT  # on the connection's socket: reads and writes give up then

    def log_message(self, format: str, *args: t.Any) -> None:
        pass


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per connection, :data:`MAX_CONNECTIONS` at most."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *args: t.Any, **kwargs: t.Any):
        super().__init__(*args, **kwargs)
        self._room = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: t.Any, client_address: t.Any) -> None:
        if not self._room.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._room.release()
            raise

    def process_request_thread(self, request: t.Any, client_address: t.Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._room.release()


def app(token: str | None) -> t.Callable[..., t.Iterable[bytes]]:
    def serve(environ: dict[str, t.Any], start_response: t.Callable[..., t.Any]) -> list[bytes]:
        def error(code: str, message: str, *extra: tuple[str, str]) -> list[bytes]:
            envelope = ErrorEnvelope(code, message)
            start_response(envelope.status_line, [*envelope.headers(), *extra])
            return [envelope.body()]

        if environ.get("PATH_INFO") != "/metrics":
            return error("NOT_FOUND", "Only /metrics is served here")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return error("METHOD_NOT_SUPPORTED", "GET /metrics")
        if not metrics.authorized(environ.get("HTTP_AUTHORIZATION"), token):
            return error(
                "UNAUTHORIZED",
                "Missing or wrong bearer token for /metrics (MEMSVC_METRICS_TOKEN)",
                ("WWW-Authenticate", "Bearer"),
            )
        body = metrics.exposition()
        start_response("200 OK", [("Content-Type", metrics.CONTENT_TYPE)])
        return [body]

    return serve


def start(address: str, token: str | None, log: t.Any) -> None:
    """Serve /metrics on ``address`` (host:port) from a daemon thread of this process."""
    host, _, port = address.rpartition(":")
    metrics.setup(())  # in the master: reads the workers' files
    host = host.strip("[]")
    server_class = _Server
    if ":" in host:  # an IPv6 address

        class _Server6(_Server):
            address_family = socket.AF_INET6

        server_class = _Server6
    server = make_server(host, int(port), app(token), server_class, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="memsvc-metrics", daemon=True)
    thread.start()
    log.info("memsvc: metrics at http://%s/metrics", address)
