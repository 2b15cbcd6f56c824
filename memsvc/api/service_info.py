"""The ``service`` router: what a client needs to know about this deployment."""

from __future__ import annotations

import typing as t

from .._version import __version__
from ..services import info
from ..services import keys
from . import inputs
from . import middleware
from . import outputs
from .procedures import Call
from .procedures import Router

router = Router(
    "service",
    __name__,
    description="What a client needs to know (API key).",
    middleware=[middleware.api_key, middleware.limited, middleware.record_use],
)


@router.query("info", input=inputs.NoInput(), output=outputs.SERVICE_INFO)
def service_info(call: Call, params: dict[str, t.Any]) -> t.Any:
    rt = call.runtime
    limits = keys.limits_of(call.caller.key, rt.default_limits)
    return info.describe(__version__, rt.embedder, rt.settings, limits)
