"""The HTTP API: the tRPC wire layer, its routers, their middleware, and ``/health``.

The only package (with the app factory) that knows about Flask: views parse
and validate a call's input, call a service with plain values, and shape
its result for the wire.
"""

from __future__ import annotations

import typing as t

from flask import Flask
from werkzeug.exceptions import HTTPException

from ..errors import HTTP_STATUS
from ..errors import for_code
from . import console
from . import health
from . import keys
from . import memory
from . import openapi
from . import service_info
from . import trpc
from .context import release_store

_CODE_FOR_STATUS = {status: code for code, status in HTTP_STATUS.items()}

#: Every router, in the order the OpenAPI document and the docs list them.
ROUTERS = (memory.router, keys.router, service_info.router)


def init_app(app: Flask) -> None:
    """Mount the API on ``app``: /trpc and its routers, /health, /openapi.json, JSON errors."""
    app.teardown_appcontext(release_store)
    app.extensions["trpc"] = {}
    app.extensions["trpc_routers"] = []
    app.register_blueprint(trpc.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(openapi.bp)
    for router in ROUTERS:
        app.register_blueprint(router)
    console.init_app(app)
    app.register_error_handler(HTTPException, _http_error)


def _http_error(e: HTTPException) -> t.Any:
    """Errors outside /trpc (unknown URLs, wrong methods) in the same envelope."""
    status = e.code or 500
    code = _CODE_FOR_STATUS.get(status, "INTERNAL_SERVER_ERROR" if status >= 500 else "BAD_REQUEST")
    error = for_code(code, e.description or e.name)
    valid = getattr(e, "valid_methods", None)
    headers = {"Allow": ", ".join(valid)} if valid else None
    return trpc.error_response(error, HTTP_STATUS[code], headers)
