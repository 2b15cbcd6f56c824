"""The ``keys`` router: a tenant manages its API keys, signed in with a JWT."""

from __future__ import annotations

import typing as t

from flask import current_app

from ..services import keys
from . import middleware
from . import schemas
from .context import store
from .trpc import Call
from .trpc import Router

router = Router("keys", __name__, middleware=[middleware.bearer_token, middleware.tenant_limited])


@router.query("list", output=schemas.keys_out)
def list_keys(call: Call, params: dict[str, t.Any]) -> t.Any:
    return keys.list_for(store(), call.caller.tenant)


@router.mutation("create", input=schemas.CreateKeyInput(), output=schemas.created_key_out)
def create(call: Call, params: dict[str, t.Any]) -> t.Any:
    config = current_app.config
    return keys.create(
        store(),
        call.caller.tenant,
        params["name"],
        config["API_KEY_WORD"],
        max_active=config["MAX_KEYS_PER_TENANT"],
    )


@router.mutation("revoke", input=schemas.IdInput())
def revoke(call: Call, params: dict[str, t.Any]) -> t.Any:
    keys.revoke(store(), call.caller.tenant, params["id"])
    return {"success": True}
