"""The ``keys`` router: a tenant manages its API keys, signed in with a JWT."""

from __future__ import annotations

import typing as t

from ..errors import Forbidden
from ..errors import NotFound
from ..observability import audit
from ..services import keys
from . import inputs
from . import middleware
from . import outputs
from .procedures import Call
from .procedures import Router

router = Router(
    "keys",
    __name__,
    description="A tenant's API keys (identity-provider JWT).",
    middleware=[middleware.bearer_token, middleware.tenant_limited],
)


# No input schema: as on a tRPC server whose procedure declares no input,
# whatever input a call carries is ignored.
@router.query("list", output=outputs.KEYS)
def list_keys(call: Call, params: dict[str, t.Any]) -> t.Any:
    return keys.list_for(call.store(), call.caller.tenant)


@router.mutation(
    "create", input=inputs.CreateKeyInput(), output=outputs.CREATED_KEY, errors=[Forbidden]
)
def create(call: Call, params: dict[str, t.Any]) -> t.Any:
    config = call.config
    created = keys.create(
        call.store(),
        call.caller.tenant,
        params["name"],
        config["API_KEY_WORD"],
        max_active=config["MAX_KEYS_PER_TENANT"],
    )
    audit.record("keys.create", "token", call.caller.tenant, key_id=created.key.id)
    return created


@router.mutation("revoke", input=inputs.IdInput(), output=outputs.SUCCESS, errors=[NotFound])
def revoke(call: Call, params: dict[str, t.Any]) -> t.Any:
    keys.revoke(call.store(), call.caller.tenant, params["id"])
    audit.record("keys.revoke", "token", call.caller.tenant, key_id=params["id"])
    return {"success": True}


@router.mutation(
    "setLimits",
    input=inputs.SetKeyLimitsInput(),
    output=outputs.KEY,
    errors=[NotFound, Forbidden],
)
def set_limits(call: Call, params: dict[str, t.Any]) -> t.Any:
    given = {
        name: params[field]
        for field, name in (("rateLimit", "per_minute"), ("concurrencyLimit", "concurrent"))
        if field in params
    }
    key = keys.tighten_limits(
        call.store(), call.caller.tenant, params["id"], call.runtime.default_limits, **given
    )
    audit.record(
        "keys.setLimits",
        "token",
        call.caller.tenant,
        key_id=key.id,
        per_minute=key.rate_limit,
        concurrent=key.concurrency_limit,
    )
    return key
