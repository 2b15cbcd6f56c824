"""Request ids, access and audit lines, /metrics: on the app (see :mod:`memsvc.observability`)."""

from __future__ import annotations

import logging
import typing as t

from flask import Flask
from flask import Response
from flask import current_app
from flask import request
from flask.logging import default_handler

from ..observability import audit
from ..observability import logs
from ..observability import metrics
from ..observability import tracing
from ..observability.requests import RequestMiddleware


def install(app: Flask) -> None:
    """Log format, audit file, request ids and the access line; metrics if configured."""
    config = app.config
    logs.configure(config["LOG_FORMAT"])
    logging.getLogger("memsvc").removeHandler(default_handler)  # memsvc's own is there
    audit.configure(config["AUDIT_LOG"])
    tracing.start(config["TRACING"])
    tracing.instrument(app.extensions["memsvc"], provider(config))
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
    from ..errors import Unauthorized
    from .trpc import error_response

    if not metrics.authorized(
        request.headers.get("Authorization"), current_app.config["METRICS_TOKEN"]
    ):
        error = Unauthorized("Missing or wrong bearer token for /metrics (MEMSVC_METRICS_TOKEN)")
        return error_response(error, headers={"WWW-Authenticate": "Bearer"})
    return Response(metrics.exposition(), content_type=metrics.CONTENT_TYPE)
