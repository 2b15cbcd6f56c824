"""``GET /health``: is the service up, and can it read its database?"""

from __future__ import annotations

import logging

from flask import Blueprint
from flask import Response

from .. import clock
from ..store import storage_problem
from ..wire import object_schema
from .context import runtime
from .context import store
from .procedures import Component
from .trpc import json_response

log = logging.getLogger(__name__)

#: What ``/health`` answers, as the OpenAPI document describes it.
HEALTH = Component(
    "Health",
    object_schema(
        {
            "status": {"type": "string", "enum": ["ok", "error"]},
            "db": {"type": "string", "enum": ["connected", "disconnected"]},
            "timestamp": {"type": "integer", "description": "Epoch milliseconds."},
        },
        ["status", "db", "timestamp"],
    ),
)

bp = Blueprint("health", __name__)


@bp.get("/health")
def health() -> Response:
    """Healthy: the database can be read and written, and no call failed on storage lately.

    Unhealthy answers say what is wrong in ``detail``: a read-only database or
    a full disk leave reads working but memsvc unable to keep anything.
    """
    rt = runtime()
    try:
        s = store()
        s.ping()
        s.probe_write()
    except Exception as e:
        problem = storage_problem(e) or "the database cannot be read"
        log.warning("health check: %s: %s", problem, e)
        # Whatever broke, the next request should start from a fresh connection.
        rt.backend.discard()
        return _unhealthy(problem)
    trouble = rt.backend.failures.recent()
    if trouble is not None:
        return _unhealthy(trouble)
    return json_response({"status": "ok", "db": "connected", "timestamp": clock.now_ms()})


def _unhealthy(problem: str) -> Response:
    return json_response(
        {"status": "error", "db": "disconnected", "detail": problem, "timestamp": clock.now_ms()},
        503,
    )
