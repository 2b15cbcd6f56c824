"""gunicorn's thread worker, hardened: whole requests before threads, memsvc's error envelope.

Slow clients: stock gthread hands a connection to a thread as soon as its
first byte arrives, and the thread then blocks reading the rest with no
deadline, so a few clients sending a byte now and then hold every thread.
This worker reads each request (line, headers and a body of known length,
up to the body limit) without blocking, a piece at a time, as the poller
says bytes arrived; only a whole request goes to a thread, which then never
waits on the client. A request not whole within ``MEMSVC_REQUEST_TIMEOUT``
seconds of its first byte is answered ``408`` and the connection closed; a
request line over ``MEMSVC_MAX_URL_BYTES`` is refused at once, before the
rest of it is read.

Requests gunicorn cannot parse: a request line or header it cannot parse,
a header over ``limit_request_field_size``, conflicting ``Content-Length``
and ``Transfer-Encoding``, a broken chunked body. Stock gunicorn answers
those with an HTML page and logs the offending bytes, which may hold a
header's value (an API key on a line without its colon, say). This worker
answers them in the error envelope every other memsvc error uses, and logs
only what kind of problem it was.

It overrides gthread's public methods (``handle``, ``handle_request``,
``finish_request``, ``handle_error``, ``murder_pending``) and none of its
private names: it waits for the rest of a request with a poller queue of
its own. Those methods and the connection's attributes are gunicorn 27's,
which setup.cfg requires; tests/unit/test_gunicorn_worker.py fails, naming
what is missing, on a gunicorn without them.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import re
import selectors
import socket
import ssl
import time
import typing as t

from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.http.wsgi import Response
from gunicorn.http.wsgi import default_environ
from gunicorn.workers.gthread import ThreadWorker

from ..errors import ErrorEnvelope
from .pool import LastIdleFirstPool

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
_FORBIDDEN = {"ForbiddenProxyRequest"}
# Raised while the app's own response is being written: the app's fault.
_SERVER_FAULTS = {"InvalidResponseHeader", "InvalidResponseHeaderName", "ConfigurationProblem"}

# Headers gathered beyond the request line before giving up: gunicorn then
# refuses fields over its own limits one by one.
_HEADER_ROOM = 256 * 1024
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*(\d+)[ \t]*(?=\r\n)", re.I)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding[ \t]*:[^\r\n]*chunked", re.I)

#: What :meth:`JSONErrorThreadWorker.handle` returns for a request not yet
#: whole: the connection waits on the poller for more, holding no thread.
_WAIT_FOR_MORE = object()


@dataclasses.dataclass
class _Gathered:
    """What has arrived of the next request on a connection."""

    data: bytearray = dataclasses.field(default_factory=bytearray)
    #: time.monotonic() of its first byte.
    started: float | None = None


class _Refusal(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def request_complete(data: bytes | bytearray, max_line: int, max_body: int) -> bool:
    """Whether ``data`` holds a whole request; :class:`_Refusal` when it never will be valid.

    Whole: the head (line and headers) and, for a body of known length, the
    body, unless it is over ``max_body`` (the app refuses that one without
    reading it). A chunked body is left to the app to read.
    """
    line_end = data.find(b"\r\n")
    if (line_end == -1 and len(data) > max_line) or line_end > max_line:
        raise _Refusal(
            "BAD_REQUEST",
            f"Request line too long: at most {max_line} bytes (a tRPC query's input "
            "is in the URL; send large inputs as a POST body)",
        )
    head_end = data.find(b"\r\n\r\n")
    if head_end == -1:
        if len(data) > max(line_end, 0) + _HEADER_ROOM:
            raise _Refusal("BAD_REQUEST", "Request header fields too large")
        return False
    head = bytes(data[: head_end + 2])
    if _CHUNKED.search(head):
        return True
    length = _CONTENT_LENGTH.search(head)
    if length is None:
        return True
    body = int(length.group(1))
    return body > max_body or len(data) - (head_end + 4) >= body


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
    envelope = ErrorEnvelope(code, message)
    body = envelope.body()
    head = "".join(
        f"{name}: {value}\r\n"
        for name, value in [
            ("Connection", "close"),
            *envelope.headers(),
            ("Content-Length", str(len(body))),
        ]
    )
    return f"HTTP/1.1 {envelope.status_line}\r\n{head}\r\n".encode("latin-1") + body


class JSONErrorThreadWorker(ThreadWorker):
    """gthread: whole requests before threads, and refusals in memsvc's error envelope."""

    #: Defaults; the app's settings replace them (see :meth:`_limits`).
    request_timeout = 30.0
    max_line = 1024 * 1024
    max_body = 1024 * 1024
    _limits_read = False

    def get_thread_pool(self) -> LastIdleFirstPool:
        """Requests go to the thread idle the shortest time (see :mod:`.pool`)."""
        return LastIdleFirstPool(self.cfg.threads)

    def _limits(self) -> None:
        """Take the limits from the app's settings, once, in the worker."""
        config = getattr(self.wsgi, "config", None) or {}
        # An app that is not memsvc's (a benchmark's bare Flask app) keeps the defaults.
        self.request_timeout = float(config.get("REQUEST_TIMEOUT", self.request_timeout))
        self.max_line = int(config.get("MAX_URL_BYTES", self.max_line))
        self.max_body = int(config.get("MAX_CONTENT_LENGTH") or self.max_body)
        self._limits_read = True

    def handle(self, conn):  # noqa: ANN001 - gunicorn's signature
        if self.cfg.is_ssl or conn.is_http2:
            return super().handle(conn)
        if not self._limits_read:
            self._limits()
        gathered = conn.__dict__.setdefault("memsvc_gathered", _Gathered())
        try:
            whole = self._gather(conn, gathered)
        except _Refusal as refusal:
            self._refuse(conn, refusal)
            return False
        except OSError:
            return False  # reset or closed by the client: nothing to answer
        if whole is None:
            return False
        if not whole:
            return _WAIT_FOR_MORE  # back to the poller until more arrives, no thread held
        conn.memsvc_gathered = _Gathered()
        conn.init()
        conn.parser.unreader.unread(bytes(gathered.data))
        conn.data_ready = True
        return super().handle(conn)

    def _gather(self, conn, gathered: _Gathered) -> bool | None:  # noqa: ANN001
        """Read what has arrived; True when the request is whole, None when the client left."""
        if conn.parser is not None:
            gathered.data += conn.parser.unreader.take_buffered()  # pipelined already
        conn.sock.setblocking(False)
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                return None if not gathered.data else True
            gathered.data += chunk
            if gathered.started is None:
                gathered.started = time.monotonic()
            if len(gathered.data) > self.max_line + self.max_body + _HEADER_ROOM:
                break
        if request_complete(gathered.data, self.max_line, self.max_body):
            return True
        if gathered.started is not None and (
            time.monotonic() - gathered.started > self.request_timeout
        ):
            raise _Refusal(
                "TIMEOUT", f"Request not received within {self.request_timeout:g} seconds"
            )
        return False

    def _refuse(self, conn, refusal: _Refusal) -> None:  # noqa: ANN001
        self.log.warning(
            "Refused request from ip=%s: %s", (conn.client or ("",))[0], refusal.message
        )
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(1)
            util.write_nonblock(conn.sock, error_response(refusal.code, refusal.message))
        except Exception:
            self.log.debug("Failed to send error message.")

    # -- closing connections without stalling the event loop --------------------------
    # gunicorn closes a connection "gracefully" on its main thread: it shuts
    # down its side, then reads until the client closes, up to 2 s. A client
    # that never closes stalls every other connection of the worker for those
    # 2 s, each time. Here the lingering happens in the poller instead.

    _LINGER = 2.0

    def init_process(self) -> None:
        self._closing: collections.deque[tuple[float, socket.socket]] = collections.deque()
        #: Connections whose request is not whole yet, oldest first.
        self._waiting: collections.deque[t.Any] = collections.deque()
        super().init_process()

    def finish_request(self, conn, fs) -> None:  # noqa: ANN001 - gunicorn's signature
        try:
            result = fs.result() if not fs.cancelled() else False
        except Exception:
            result = None  # gunicorn's own handling: closed at once
        if result is _WAIT_FOR_MORE:
            if self.alive:
                self._wait_for_more(conn)
                return
            result = False  # stopping: no new request is taken
        if result is False:
            self.nr_conns -= 1
            self._linger(conn.sock)
            return
        super().finish_request(conn, fs)

    def _wait_for_more(self, conn) -> None:  # noqa: ANN001
        """Put ``conn`` on the poller until more of its request arrives.

        As gthread does for a connection whose first bytes are late: a
        connection that sends nothing more for ``keepalive`` seconds is
        closed (see :meth:`murder_pending`).
        """
        conn.sock.setblocking(False)
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self._waiting.append(conn)
        self.poller.register(
            conn.sock, selectors.EVENT_READ, functools.partial(self._more_arrived, conn)
        )

    def _more_arrived(self, conn, _client: t.Any = None) -> None:  # noqa: ANN001
        self.poller.unregister(conn.sock)
        self._waiting.remove(conn)
        self.enqueue_req(conn)

    def _linger(self, sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, functools.partial(self._drain, sock))
        except (OSError, ValueError, KeyError):
            util.close(sock)
            return
        self._closing.append((time.monotonic() + self._LINGER, sock))

    def _drain(self, sock: socket.socket, _client: t.Any = None) -> None:
        try:
            if sock.recv(65536):
                return  # more left behind by the client; keep lingering
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._forget(sock)

    def _forget(self, sock: socket.socket) -> None:
        try:
            self.poller.unregister(sock)
        except (OSError, ValueError, KeyError):
            pass
        util.close(sock)

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self._closing and (self._closing[0][0] <= now or self._closing[0][1].fileno() < 0):
            self._forget(self._closing.popleft()[1])
        while self._waiting and self._waiting[0].timeout <= now:
            conn = self._waiting.popleft()
            try:
                self.poller.unregister(conn.sock)
            except (OSError, KeyError, ValueError):
                pass
            self.nr_conns -= 1
            conn.close()

    def handle_request(self, req, conn):  # noqa: ANN001 - gunicorn's signature
        keepalive = super().handle_request(req, conn)
        req.memsvc_answered = True
        return keepalive

    def handle_error(self, req, client, addr, exc):  # noqa: ANN001 - gunicorn's signature
        started = datetime.datetime.now()
        addr = addr or ("", -1)
        if isinstance(exc, http_errors.ParseException) and getattr(req, "memsvc_answered", False):
            # gunicorn skips the unread body of an answered request; if that
            # body is malformed, stock gunicorn writes a second answer, which
            # a keep-alive client would take for its next request's.
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
                resp.status = ErrorEnvelope(code, message).status_line
                resp.response_length = 0
                self.log.access(resp, req, environ, datetime.datetime.now() - started)
            except Exception:
                self.log.debug("Failed to log the refused request.")
