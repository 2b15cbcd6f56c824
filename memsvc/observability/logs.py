"""memsvc's log lines: text or JSON (``MEMSVC_LOG_FORMAT``), each naming its request.

Every logger under ``memsvc`` (the access and audit lines included) writes
through one handler on stderr, which gunicorn's error log is. In ``json``
format each line is one JSON object, for log shippers: ``time``, ``level``,
``logger``, ``message``, ``request_id`` when written during a request, and
an access or audit line's fields.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import time
import typing as t

from . import access_log
from . import audit
from . import requests

TEXT_FORMAT = "[%(asctime)s] %(levelname)s in %(module)s: %(message)s"


class RequestIdFilter(logging.Filter):
    """Puts the running request's id on each record (``request_id``; None outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            running = requests.current.get()
            record.request_id = None if running is None else running.id
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        # The same second's text is made once: an access line per request.
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%d %H:%M:%S", self.converter(second)))
        return f"{self._second[1]},{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", None)
        return f"{line} request_id={rid}" if rid else line

    def info_line(self, module: str, message: str, rid: str | None) -> str:
        """What :meth:`format` makes of an INFO record of ``module`` written now."""
        now = time.time()
        second = int(now)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%d %H:%M:%S", self.converter(second)))
        msecs = int((now - second) * 1000)
        line = f"[{self._second[1]},{msecs:03d}] INFO in {module}: {message}"
        return f"{line} request_id={rid}" if rid else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, t.Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid:
            out["request_id"] = rid
        fields = getattr(record, "memsvc", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


_handler: logging.StreamHandler[t.Any] | None = None


def write_info(logger: logging.Logger, module: str, message: str, rid: str | None) -> bool:
    """Write an INFO line of ``logger`` as text straight to memsvc's handler; False if it may not.

    For the access line, one per request: the same line logging would
    write, without a record, filters and formatter calls, when memsvc's
    text handler is the only place it would go. Any other configuration
    (handlers or filters added, JSON lines, logging disabled) returns False,
    and the caller logs the usual way.
    """
    handler = _handler
    if (
        handler is None
        or logger.filters
        or logger.disabled
        or logging.root.manager.disable >= logging.INFO
        or handler.level > logging.INFO
        or len(handler.filters) != 1
        or type(handler.filters[0]) is not RequestIdFilter
        or type(handler.formatter) is not TextFormatter
    ):
        return False
    # Where logging would take the record: every handler up the tree.
    node: logging.Logger | None = logger
    found = 0
    while node is not None:
        for other in node.handlers:
            if other is not handler:
                return False
            found += 1
        if not node.propagate:
            break
        node = node.parent
    if found != 1:
        return False
    formatter = handler.formatter
    line = formatter.info_line(module, message, rid) + handler.terminator
    with handler.lock or _NO_LOCK:
        try:
            stream = handler.stream
            stream.write(line)
            stream.flush()
        except Exception:
            return False
    return True


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def configure(log_format: str) -> logging.Handler:
    """memsvc's handler on the ``memsvc`` logger, in ``log_format``; access and audit lines on."""
    global _handler
    logger = logging.getLogger("memsvc")
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.addFilter(RequestIdFilter())
    _handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
    access_log.write_straight = write_info
    for name in (access_log.__name__, audit.__name__):
        logging.getLogger(name).setLevel(logging.INFO)
    return _handler
