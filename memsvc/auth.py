"""Who is calling: API keys for the memory router.

Each function here is tRPC middleware (see :mod:`memsvc.trpc`): it sets
``call.caller`` or refuses the call with ``401 UNAUTHORIZED``. A batch
carries one set of headers, so the credential is verified once per request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing as t

from flask import g
from flask import request

from .errors import ApiError
from .errors import Unauthorized
from .models import ApiKey
from .runtime import store
from .services import keys
from .trpc import Call


@dataclasses.dataclass(frozen=True)
class Caller:
    tenant: str
    #: The API key used, for memory calls.
    key: ApiKey | None = None


def _once(name: str, verify: t.Callable[[], Caller]) -> Caller:
    """Run ``verify`` once per request; later calls get its result or its error."""
    cached = g.get(name)
    if cached is None:
        try:
            cached = verify()
        except ApiError as e:
            cached = e
        setattr(g, name, cached)
    if isinstance(cached, ApiError):
        raise cached
    return cached


def _verify_api_key() -> Caller:
    secret = request.headers.get("x-api-key")
    if not secret:
        raise Unauthorized("Missing API key: send it in the x-api-key header")
    key = keys.verify(store(), secret)
    return Caller(tenant=key.tenant, key=key)


@contextlib.contextmanager
def api_key(call: Call) -> t.Iterator[None]:
    """Middleware: the call must carry a valid, unrevoked ``x-api-key``."""
    call.caller = _once("memsvc_api_key_caller", _verify_api_key)
    yield
