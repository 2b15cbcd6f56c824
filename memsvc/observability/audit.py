"""The audit trail: one line per administrative action, on this module's logger.

Who did it (an API key id, a token's tenant, or the operating-system user
running the ``memsvc`` command), what (``keys.create``, ``keys.revoke``,
``keys.set-limits``, ``memory.deleteAll``, ``import``), on which tenant,
when, and what it touched (ids and counts, never a secret, a user id or
text). Lines go to the server's log (stderr), in ``MEMSVC_LOG_FORMAT``;
with ``MEMSVC_AUDIT_LOG`` set they are also appended to that file, from
the server and from every ``memsvc`` command alike.
"""

from __future__ import annotations

import datetime
import getpass
import json
import logging
import os
import threading
import typing as t

from . import metrics

log = logging.getLogger(__name__)

_file_lock = threading.Lock()
_file: str | None = None


def configure(path: str | None) -> None:
    """Also append every audit line to ``path`` (None: only the log)."""
    global _file
    _file = path


def operator() -> str:
    """Who runs this ``memsvc`` command: the operating-system user."""
    try:
        return "os-user:" + getpass.getuser()
    except Exception:
        return f"os-uid:{os.getuid()}"


def record(action: str, who: str, tenant: str | None, **details: t.Any) -> None:
    """Write one audit line: ``who`` did ``action`` on ``tenant`` (None: every tenant)."""
    if action.startswith("keys."):
        metrics.key_operation(action.removeprefix("keys."))
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    fields = {"audit": action, "who": who, "tenant": tenant or "*", "at": now, **details}
    shown = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in details.items())
    log.info(
        "audit %s by %s tenant=%s at %s%s",
        action, who, json.dumps(tenant or "*", ensure_ascii=False), now,
        f" {shown}" if shown else "",
        extra={"memsvc": fields},
    )  # fmt: skip
    if _file:
        line = json.dumps(fields, ensure_ascii=False) + "\n"
        try:
            with _file_lock:
                fd = os.open(_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, line.encode("utf-8"))
                finally:
                    os.close(fd)
        except OSError as e:
            log.error("audit line not written to %s: %s", _file, e.strerror)
