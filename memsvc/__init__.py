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

from . import settings  # noqa: E402
from ._version import __version__  # noqa: E402
from .errors import ConfigError  # noqa: E402

__all__ = ["create_app", "ConfigError", "__version__"]


def create_app(
    test_config: t.Mapping[str, t.Any] | None = None,
    *,
    instance_path: str | None = None,
    warn_unknown: bool = True,
) -> Flask:
    """Build the app: settings, database (created or migrated), routes.

    :param test_config: settings that override every other source.
    :param instance_path: the folder holding ``config.py`` and, by default,
        the database; by default ``instance/`` beside the package.
    :param warn_unknown: log a warning for each ``MEMSVC_*`` variable that is
        no setting (``memsvc run`` has printed them already).
    :raises ConfigError: a setting is invalid, or the database cannot be used.
    """
    from . import api
    from .api import observe
    from .runtime import Runtime

    instance_path = instance_path or settings.default_instance_path()
    app = Flask(__name__, instance_path=instance_path)
    # Creates Flask's handler on the "memsvc" logger, so warnings from every
    # memsvc.* module reach stderr (gunicorn's error log) with a timestamp.
    log = app.logger
    values, warnings = settings.load(instance_path, test_config)
    for warning in warnings if warn_unknown else ():
        log.warning("%s", warning)
    app.config.update(values)
    # "/trpc//memory.add" is an unknown procedure (404), not a redirect.
    app.url_map.merge_slashes = False
    # No empty 200 for OPTIONS: every answer is in the envelope (405 outside
    # /trpc). memsvc serves no browsers directly, so there is no CORS to answer.
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False

    runtime = Runtime(values, instance_path)
    runtime.prepare(check_embedder=True)
    runtime.backend.hold_for_serving()
    app.extensions["memsvc"] = runtime
    api.init_app(app)
    observe.install(app)
    return app
