"""memsvc: long-term memory for AI applications, over tRPC, on SQLite + sqlite-vec."""

from __future__ import annotations

import os
import typing as t

# numpy's BLAS would start a thread per core in every worker thread of every
# gunicorn worker; one embedding at a time per thread is faster on a busy box.
# Must be set before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from flask import Flask  # noqa: E402
from werkzeug.exceptions import HTTPException  # noqa: E402

from . import config  # noqa: E402
from .errors import HTTP_STATUS  # noqa: E402
from .errors import ConfigError  # noqa: E402
from .errors import for_code  # noqa: E402

__all__ = ["create_app", "ConfigError"]

_CODE_FOR_STATUS = {status: code for code, status in HTTP_STATUS.items()}


def create_app(
    test_config: t.Mapping[str, t.Any] | None = None,
    *,
    check_embedder: bool = True,
    instance_path: str | None = None,
) -> Flask:
    """Build the app: settings, database (created or migrated), routes.

    :param test_config: settings that override every other source.
    :param check_embedder: refuse a database whose vectors come from another
        model than the configured one. Only ``memsvc reembed`` and other
        maintenance commands turn this off.
    :param instance_path: the folder holding ``config.py`` and, by default,
        the database; Flask's default is ``instance/`` beside the package.
    :raises ConfigError: a setting is invalid, or the database cannot be used.
    """
    app = Flask(__name__, instance_relative_config=True, instance_path=instance_path)
    # "/trpc//memory.add" is an unknown procedure (404), not a redirect.
    app.url_map.merge_slashes = False
    # No empty 200 for OPTIONS: every answer is in the envelope (405 outside
    # /trpc). memsvc serves no browsers directly, so there is no CORS to answer.
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.config.from_mapping(config.DEFAULTS)
    app.config.from_pyfile("config.py", silent=True)
    app.config.from_prefixed_env("MEMSVC")
    if test_config is not None:
        app.config.from_mapping(test_config)
    if app.config["DATABASE"] is None:
        app.config["DATABASE"] = os.path.join(app.instance_path, "memsvc.sqlite3")
    config.validate(app.config)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(app.config["DATABASE"])), exist_ok=True)
    except OSError as e:
        path = app.config["DATABASE"]
        raise ConfigError(f"MEMSVC_DATABASE {path!r} cannot be used: {e}") from None

    from .runtime import Runtime
    from .runtime import release_store

    runtime = Runtime(app.config, app.instance_path)
    runtime.prepare(check_embedder=check_embedder)
    app.extensions["memsvc"] = runtime
    app.teardown_appcontext(release_store)

    from . import health
    from . import trpc
    from .routers import keys
    from .routers import memory

    app.extensions["trpc"] = {}
    app.register_blueprint(trpc.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(memory.router)
    app.register_blueprint(keys.router)

    app.register_error_handler(HTTPException, _http_error)
    # Creates Flask's handler on the "memsvc" logger, so warnings from every
    # memsvc.* module reach stderr (gunicorn's error log) with a timestamp.
    app.logger.debug("memsvc app created")
    return app


def _http_error(e: HTTPException) -> t.Any:
    """Errors outside /trpc (unknown URLs, wrong methods) in the same envelope."""
    from .trpc import error_body
    from .trpc import json_response

    status = e.code or 500
    code = _CODE_FOR_STATUS.get(status, "INTERNAL_SERVER_ERROR" if status >= 500 else "BAD_REQUEST")
    error = for_code(code, e.description or e.name)
    headers = {"Allow": ", ".join(e.valid_methods)} if getattr(e, "valid_methods", None) else None
    return json_response(error_body(error, None), HTTP_STATUS[code], headers)
