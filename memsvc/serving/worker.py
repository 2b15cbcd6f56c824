"""gunicorn's thread worker, answering requests it cannot parse as memsvc does.

gunicorn refuses some requests before the app sees them: a request line or
header it cannot parse, a header over ``limit_request_field_size``,
conflicting ``Content-Length`` and ``Transfer-Encoding``, a broken chunked
body. Stock gunicorn answers those with an HTML page and logs the offending
bytes, which may hold a header's value (an API key on a line without its
colon, say). This worker answers them in the error envelope every other
memsvc error uses, and logs only what kind of problem it was.
"""

from __future__ import annotations

import datetime
import json
import ssl
import typing as t

from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.http.wsgi import Response
from gunicorn.http.wsgi import default_environ
from gunicorn.workers.gthread import ThreadWorker

from ..errors import HTTP_STATUS

# By class name, so a gunicorn release lacking one of them still loads.
_MESSAGES = {
    "InvalidRequestLine": "Malformed request line",
    "InvalidRequestMethod": "Invalid request method",
    "InvalidHTTPVersion": "Unsupported HTTP version",
    "LimitRequestLine": "Request line too long",
    "LimitRequestHeaders": "Request header fields too large",
    "InvalidHeader": "Malformed header",
    "InvalidHeaderName": "Malformed header name",
    "ObsoleteFolding": "Folded (multi-line) headers are not accepted",
    "UnsupportedTransferCoding": "Unsupported transfer coding",
    "InvalidChunkSize": "Malformed chunked body",
    "ChunkMissingTerminator": "Malformed chunked body",
    "InvalidChunkExtension": "Malformed chunked body",
    "ExpectationFailed": "Unsupported Expect header",
    "InvalidProxyLine": "Malformed PROXY protocol line",
    "InvalidProxyHeader": "Malformed PROXY protocol header",
    "InvalidSchemeHeaders": "Contradictory scheme headers",
    "InvalidH2CPreface": "HTTP/2 is not supported",
}
_BODY_FRAMING = {"InvalidChunkSize", "ChunkMissingTerminator", "InvalidChunkExtension"}
_FORBIDDEN = {"ForbiddenProxyRequest"}
# Raised while the app's own response is being written: the app's fault.
_SERVER_FAULTS = {"InvalidResponseHeader", "InvalidResponseHeaderName", "ConfigurationProblem"}

_REASONS = {400: "Bad Request", 403: "Forbidden", 500: "Internal Server Error"}


def classify(exc: BaseException, cfg: t.Any = None) -> tuple[str, str]:
    """The tRPC error code and a caller-safe message for a refused request.

    The message never quotes the request: it may hold a secret.
    """
    if isinstance(exc, ssl.SSLError):
        return "BAD_REQUEST", "TLS error"
    names = [cls.__name__ for cls in type(exc).__mro__]
    if not isinstance(exc, http_errors.ParseException) or names[0] in _SERVER_FAULTS:
        return "INTERNAL_SERVER_ERROR", "Internal server error"
    if names[0] in _FORBIDDEN:
        return "FORBIDDEN", "Request forbidden"
    message = next((_MESSAGES[n] for n in names if n in _MESSAGES), "Malformed HTTP request")
    if names[0] == "LimitRequestHeaders" and cfg is not None:
        message += (
            f" (at most {cfg.limit_request_fields} headers"
            f" of at most {cfg.limit_request_field_size} bytes each)"
        )
    return "BAD_REQUEST", message


def error_response(code: str, message: str) -> bytes:
    """A complete HTTP/1.1 response carrying the error envelope."""
    status = HTTP_STATUS[code]
    body = json.dumps(
        {"error": {"message": message, "code": code, "data": {"code": code, "httpStatus": status}}},
        separators=(",", ":"),
    ).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class JSONErrorThreadWorker(ThreadWorker):
    """gthread, with gunicorn's own refusals in memsvc's error envelope."""

    def _keepalive_after(self, conn, keepalive):  # noqa: ANN001 - gunicorn 27's hook
        # gunicorn 27 skips the unread body of an answered request here; if
        # that body is malformed, stock gunicorn writes a second answer,
        # which a keep-alive client would take for its next request's.
        try:
            return super()._keepalive_after(conn, keepalive)
        except http_errors.ParseException as e:
            self.log.info("Closed connection after an unreadable body: %s", type(e).__name__)
            return False

    def handle_error(self, req, client, addr, exc):  # noqa: ANN001 - gunicorn's signature
        started = datetime.datetime.now()
        addr = addr or ("", -1)
        if req is None and type(exc).__name__ in _BODY_FRAMING:
            # gunicorn before 27 skips an answered request's unread body
            # while reading the next request: same case as above.
            self.log.info("Closed connection after an unreadable body: %s", type(exc).__name__)
            return
        code, message = classify(exc, self.cfg)
        if code == "INTERNAL_SERVER_ERROR":
            where = f"{req.method} {req.path}" if hasattr(req, "path") else "(no request read)"
            self.log.exception("Error handling request %s", where)
        else:
            self.log.warning("Refused request from ip=%s: %s", addr[0], type(exc).__name__)
        try:
            util.write_nonblock(client, error_response(code, message))
        except Exception:
            self.log.debug("Failed to send error message.")
        # A request refused for a bad header was read far enough to log.
        bad_header = (http_errors.InvalidHeader, http_errors.InvalidHeaderName)
        if req is None and isinstance(exc, bad_header):
            req = getattr(exc, "req", None)
        if req is not None:
            try:
                environ = default_environ(req, client, self.cfg)
                environ["REMOTE_ADDR"] = addr[0]
                environ["REMOTE_PORT"] = str(addr[1])
                resp = Response(req, client, self.cfg)
                resp.status = f"{HTTP_STATUS[code]} {_REASONS[HTTP_STATUS[code]]}"
                resp.response_length = 0
                self.log.access(resp, req, environ, datetime.datetime.now() - started)
            except Exception:
                self.log.debug("Failed to log the refused request.")
