"""``MEMSVC_METRICS_BIND``: /metrics on an address of its own, served by gunicorn's master.

The master reads every worker's metric files (see
:mod:`memsvc.observability.metrics`), so a scrape here sees the whole
server, and keeps answering while workers restart. One small thread; it
answers ``GET /metrics`` (with the bearer token when
``MEMSVC_METRICS_TOKEN`` is set) and ``404`` to anything else.
"""

from __future__ import annotations

import json
import threading
import typing as t
from wsgiref.simple_server import WSGIRequestHandler
from wsgiref.simple_server import make_server

from ..observability import metrics


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: t.Any) -> None:
        pass


def app(token: str | None) -> t.Callable[..., t.Iterable[bytes]]:
    def serve(environ: dict[str, t.Any], start_response: t.Callable[..., t.Any]) -> list[bytes]:
        def error(status: str, code: str, message: str, *extra: tuple[str, str]) -> list[bytes]:
            body = json.dumps(
                {"error": {"message": message, "code": code,
                           "data": {"code": code, "httpStatus": int(status[:3])}}},
                separators=(",", ":"),
            ).encode()  # fmt: skip
            start_response(status, [("Content-Type", "application/json"), *extra])
            return [body]

        if environ.get("PATH_INFO") != "/metrics":
            return error("404 Not Found", "NOT_FOUND", "Only /metrics is served here")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return error("405 Method Not Allowed", "METHOD_NOT_SUPPORTED", "GET /metrics")
        if not metrics.authorized(environ.get("HTTP_AUTHORIZATION"), token):
            return error(
                "401 Unauthorized", "UNAUTHORIZED",
                "Missing or wrong bearer token for /metrics (MEMSVC_METRICS_TOKEN)",
                ("WWW-Authenticate", "Bearer"),
            )  # fmt: skip
        body = metrics.exposition()
        start_response("200 OK", [("Content-Type", metrics.CONTENT_TYPE)])
        return [body]

    return serve


def start(address: str, token: str | None, log: t.Any) -> None:
    """Serve /metrics on ``address`` (host:port) from a daemon thread of this process."""
    host, _, port = address.rpartition(":")
    metrics.setup(())  # in the master: reads the workers' files
    server = make_server(host.strip("[]"), int(port), app(token), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="memsvc-metrics", daemon=True)
    thread.start()
    log.info("memsvc: metrics at http://%s/metrics", address)
