"""Can memsvc keep memories now? What ``/health`` answers and the console's service page shows.

Healthy: the database can be read and written, and no call failed on
storage lately (in any process sharing the database, see
:class:`~memsvc.store.backend.StorageFailures`). Otherwise what is wrong,
in the operator's words: a read-only database or a full disk leave reads
working but memsvc unable to keep anything.
"""

from __future__ import annotations

import logging
import typing as t

from ..store import Backend
from ..store import Store
from ..store import storage_problem

log = logging.getLogger(__name__)


def problem(backend: Backend, store: t.Callable[[], Store]) -> str | None:
    """What keeps memsvc from working now, or None when it is healthy.

    ``store`` gives the store to probe (the request's); a probe that fails
    closes its connection, so that the next request starts from a fresh one.
    """
    try:
        s = store()
        s.ping()
        s.probe_write()
    except Exception as e:
        found = storage_problem(e) or "the database cannot be read"
        log.warning("health check: %s: %s", found, e)
        backend.discard()
        return found
    return backend.failures.recent()
