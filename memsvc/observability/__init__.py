"""What the service is doing: request ids, access and audit lines, Prometheus metrics.

:func:`install` puts it all on an app; the rest of memsvc calls the hooks
in :mod:`.requests`, :mod:`.metrics` and :mod:`.audit`, each a line or two.
"""

from __future__ import annotations

import typing as t

from flask import Flask
from flask import Response
from flask import current_app
from flask import request

from . import audit
from . import logs
from . import metrics
from .requests import RequestMiddleware


def install(app: Flask) -> None:
    """Log format, audit file, request ids and the access line; metrics if configured."""
    config = app.config
    logs.configure(config["LOG_FORMAT"])
    audit.configure(config["AUDIT_LOG"])
    if metrics.enabled(config):
        metrics.setup(app.extensions.get("trpc", {}))
        runtime = app.extensions["memsvc"]
        metrics.instrument_embedder(runtime.embedder, provider(config))
        if config["METRICS_TOKEN"]:
            app.add_url_rule("/metrics", "metrics", _metrics_view)
    app.wsgi_app = RequestMiddleware(  # type: ignore[method-assign]
        app.wsgi_app,
        full_urls=config["LOG_FULL_URLS"],
        json_lines=config["LOG_FORMAT"] == "json",
    )


def provider(config: t.Mapping[str, t.Any]) -> str:
    """The embedding provider's label: ``local`` or ``openai``."""
    return str(config["EMBEDDER"])


def _metrics_view() -> Response:
    from ..api.trpc import error_body
    from ..api.trpc import json_response
    from ..errors import Unauthorized

    if not metrics.authorized(
        request.headers.get("Authorization"), current_app.config["METRICS_TOKEN"]
    ):
        error = Unauthorized("Missing or wrong bearer token for /metrics (MEMSVC_METRICS_TOKEN)")
        return json_response(error_body(error, None), 401, {"WWW-Authenticate": "Bearer"})
    return Response(metrics.exposition(), content_type=metrics.CONTENT_TYPE)
