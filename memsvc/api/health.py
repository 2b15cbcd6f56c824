"""``GET /health``: is the service up, and can it read its database?"""

from __future__ import annotations

from flask import Blueprint
from flask import Response

from .. import clock
from ..services import readiness
from ..wire import object_schema
from .context import runtime
from .context import store
from .procedures import Component
from .trpc import json_response

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

    Unhealthy answers say what is wrong in ``detail`` (:func:`memsvc.services.readiness.problem`).
    """
    problem = readiness.problem(runtime().backend, store)
    if problem is not None:
        return json_response(
            {"status": "error", "db": "disconnected", "detail": problem,
             "timestamp": clock.now_ms()},
            503,
        )  # fmt: skip
    return json_response({"status": "ok", "db": "connected", "timestamp": clock.now_ms()})
