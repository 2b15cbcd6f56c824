"""``GET /health``: is the service up, and can it read its database?"""

from __future__ import annotations

import logging

from flask import Blueprint
from flask import Response

from .. import clock
from .context import runtime
from .context import store
from .trpc import json_response

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)


@bp.get("/health")
def health() -> Response:
    try:
        store().ping()
    except Exception as e:
        log.warning("health check: database unreachable: %s", e)
        # Whatever broke, the next request should start from a fresh connection.
        runtime().db.discard()
        return json_response(
            {"status": "error", "db": "disconnected", "timestamp": clock.now_ms()}, 503
        )
    return json_response({"status": "ok", "db": "connected", "timestamp": clock.now_ms()})
