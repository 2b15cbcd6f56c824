"""The access line: one per request, on logger ``memsvc.observability.access_log``.

Duration, procedures (every one of a batch), status, the calls' error
codes, the API key's id (never its secret), the tenant and the request id.
Never a query string, user id or text, unless ``MEMSVC_LOG_FULL_URLS`` asks
for whole URLs.
"""

from __future__ import annotations

import logging
import typing as t

log = logging.getLogger(__name__)


class Record:
    """What a request did, filled in as it runs."""

    __slots__ = ("id", "calls", "key", "tenant")

    def __init__(self, rid: str) -> None:
        self.id = rid
        #: (procedure, code) of each call, in order.
        self.calls: list[tuple[str, str]] = []
        self.key: str | None = None
        self.tenant: str | None = None


def write(
    environ: dict[str, t.Any],
    record: Record,
    answer: list[t.Any],
    seconds: float,
    *,
    full_urls: bool,
    json_lines: bool,
) -> None:
    """Write ``record``'s access line; ``answer`` holds the status and headers sent."""
    status = int(answer[0][:3]) if answer else 500
    size = "-"
    for name, value in answer[1] if answer else ():
        if name == "Content-Length":
            size = value
            break
    path = environ.get("PATH_INFO", "")
    if full_urls and environ.get("QUERY_STRING"):
        path += "?" + environ["QUERY_STRING"]
    path = _printable(path)
    calls = record.calls
    if len(calls) == 1:  # most requests: one call
        ((procedure, code),) = calls
        procedures = _printable(procedure) if procedure != "-" else "-"
        error = "-" if code == "OK" else code
    else:
        procedures = _printable(",".join(p for p, _ in calls if p != "-") or "-")
        error = ",".join(dict.fromkeys(c for _, c in calls if c != "OK")) or "-"
    remote = environ.get("REMOTE_ADDR", "-")
    method = environ.get("REQUEST_METHOD", "-")
    key_id = record.key or "-"
    tenant = record.tenant or "-"
    if not json_lines:
        args = (
            remote, method, path, environ.get("SERVER_PROTOCOL", "-"), status, size,
            seconds * 1000, procedures, error, key_id, _quoted(tenant),
        )  # fmt: skip
        if write_straight(log, "access_log", _TEXT % args, record.id):
            return
    fields = {
        "request_id": record.id,
        "remote": remote,
        "method": method,
        "path": path,
        "status": status,
        "bytes": size,
        "duration_ms": round(seconds * 1000, 2),
        "procedures": procedures,
        "error": error,
        "key_id": key_id,
        "tenant": tenant,
    }
    if json_lines:
        _emit("access", (), fields)
    else:
        _emit(_TEXT, args, fields)


def _never(logger: logging.Logger, module: str, message: str, rid: str | None) -> bool:
    return False


#: Writes a text line without a log record when nothing else would see it;
#: False: log it the usual way. Set by :func:`.logs.configure`.
write_straight: t.Callable[[logging.Logger, str, str, str | None], bool] = _never

_TEXT = '%s "%s %s %s" %s %s %.1fms procedures=%s error=%s key=%s tenant=%s'


def _emit(message: str, args: tuple[t.Any, ...], fields: dict[str, t.Any]) -> None:
    """``log.info`` without its search of the stack for the caller: this module is it."""
    record = log.makeRecord(
        log.name, logging.INFO, __file__, 0, message, args, None, extra={"memsvc": fields}
    )
    log.handle(record)


#: The most of a path or list of procedures an access line shows.
MAX_SHOWN = 2048


def _printable(text: str) -> str:
    """``text`` on one line, control characters escaped, cut at :data:`MAX_SHOWN`."""
    if len(text) > MAX_SHOWN:
        text = text[:MAX_SHOWN] + "..."
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _quoted(text: str) -> str:
    """A tenant id as one word: quoted when it holds spaces or quotes."""
    if text.isprintable() and " " not in text and '"' not in text:
        return text
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'
