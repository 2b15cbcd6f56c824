"""API keys: issue, verify, list and revoke a tenant's keys."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import secrets
import uuid

from .. import clock
from ..errors import Forbidden
from ..errors import NotFound
from ..errors import Unauthorized
from ..limits import Limits
from ..models import ApiKey
from ..models import CreatedKey
from ..models import tighter
from ..store import Store


def hash_secret(secret: str) -> bytes:
    """The stored form of a secret.

    A secret carries 256 random bits, so a fast hash is enough: there is
    nothing to brute-force. Lookups go by hash, so no comparison of the
    secret itself can leak timing.
    """
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def create(store: Store, tenant: str, name: str, word: str, *, max_active: int = 0) -> CreatedKey:
    """A new active key; its secret is in the result and nowhere else.

    ``max_active``: refused with :class:`Forbidden` when the tenant already
    has that many active keys (0: no cap).
    """
    secret = f"sk_{word}_{secrets.token_hex(32)}"
    key = ApiKey(
        id=str(uuid.uuid4()),
        tenant=tenant,
        key_id=f"key_{secrets.token_hex(8)}",
        name=name,
        created_at=clock.now_ms(),
        last_used_at=None,
        revoked_at=None,
    )
    with store.write():
        if max_active and store.active_keys(tenant) >= max_active:
            raise Forbidden(
                f"This tenant already has {max_active} active API keys, the most allowed; "
                "revoke one first"
            )
        store.insert_key(key, hash_secret(secret))
    return CreatedKey(key, secret)


def verify(store: Store, secret: str) -> ApiKey:
    """The active key with this secret, or :class:`Unauthorized`."""
    key = store.key_by_hash(hash_secret(secret))
    if key is None:
        raise Unauthorized("Invalid API key")
    if not key.active:
        raise Unauthorized("API key has been revoked")
    return key


def needs_use_recorded(key: ApiKey, now: int, resolution_ms: int) -> bool:
    """Whether a use of ``key`` at ``now`` moves its lastUsedAt (see :func:`record_use`)."""
    return key.last_used_at is None or now - key.last_used_at >= resolution_ms


def record_use(store: Store, key: ApiKey, now: int, resolution_ms: int) -> None:
    """Set the key's lastUsedAt to ``now``, unless it is less than ``resolution_ms`` old.

    A busy key then costs one small write per ``resolution_ms``, not one
    per call.
    """
    if not needs_use_recorded(key, now, resolution_ms):
        return
    with store.write():
        store.touch_key(key.id, now)


def limits_of(key: ApiKey, defaults: Limits) -> Limits:
    """The limits a key's calls are counted against.

    The operator's for the key (``memsvc keys set-limits``), else the
    server's settings (``defaults``): a ceiling its tenant may only lower
    (:func:`tighten_limits`).
    """
    return Limits(
        _limit(tighter(key.rate_limit, _or(key.rate_ceiling, defaults.per_minute))),
        _limit(tighter(key.concurrency_limit, _or(key.concurrency_ceiling, defaults.concurrent))),
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _limit(value: int | None) -> int:
    assert value is not None  # a ceiling is always set
    return value


def set_limits(store: Store, key_id: str, per_minute: int | None, concurrent: int | None) -> ApiKey:
    """The operator sets a key's ceilings (None: back to the server's settings).

    The limits its tenant chose stay, and count where they are lower.
    """
    with store.write():
        if not store.set_key_limits(key_id, per_minute, concurrent, ceiling=True):
            raise NotFound("API key not found")
        key = store.get_key(key_id)
    if key is None:
        raise NotFound("API key not found")
    return key


class Unset:
    """A field a call did not give: left as it is."""


UNSET = Unset()


def _room(limit: int) -> float:
    """A limit as an amount, 0 (unlimited) as infinity."""
    return math.inf if limit == 0 else float(limit)


def tighten_limits(
    store: Store,
    tenant: str,
    key_id: str,
    defaults: Limits,
    *,
    per_minute: int | None | Unset = UNSET,
    concurrent: int | None | Unset = UNSET,
) -> ApiKey:
    """A tenant sets its own key's limits, never above what the operator allows it.

    Unset: unchanged; None: back to the key's ceiling, the operator's limit
    for it (``memsvc keys set-limits``) or else the server's setting
    (``defaults``). A new value may be at most that ceiling: a tenant lowers
    its keys' limits, only the operator raises them (:class:`Forbidden`).
    The API and the console both come here. A key of another tenant is
    refused as :func:`revoke` refuses it.
    """
    with store.write():
        key = store.get_key(key_id)
        if key is None:
            raise NotFound("API key not found")
        if key.tenant != tenant:
            raise Unauthorized("API key belongs to another user")
        rate = key.rate_limit if isinstance(per_minute, Unset) else per_minute
        conc = key.concurrency_limit if isinstance(concurrent, Unset) else concurrent
        for name, new, ceiling, default, setting in (
            ("rateLimit", per_minute, key.rate_ceiling, defaults.per_minute,
             "RATE_LIMIT_PER_MINUTE"),
            ("concurrencyLimit", concurrent, key.concurrency_ceiling, defaults.concurrent,
             "CONCURRENCY_LIMIT"),
        ):  # fmt: skip
            if isinstance(new, Unset) or new is None:
                continue
            cap = _or(ceiling, default)
            if _room(new) > _room(cap):
                whose = f"MEMSVC_{setting}" if ceiling is None else "the operator's limit for it"
                raise Forbidden(
                    f"{name} may be at most {cap} for this key ({whose}): a tenant lowers its "
                    "keys' limits, only the operator raises them (memsvc keys set-limits)"
                )
        if rate != key.rate_limit or conc != key.concurrency_limit:
            store.set_key_limits(key_id, rate, conc)
    return dataclasses.replace(key, rate_limit=rate, concurrency_limit=conc)


def list_for(store: Store, tenant: str | None) -> list[ApiKey]:
    with store.read():
        return store.list_keys(tenant)


def revoke(store: Store, tenant: str | None, key_id: str) -> ApiKey:
    """Revoke a key; revoking a revoked key changes nothing.

    With ``tenant`` None (the operator's CLI) any key may be revoked.
    """
    with store.write():
        key = store.get_key(key_id)
        if key is None:
            raise NotFound("API key not found")
        if tenant is not None and key.tenant != tenant:
            raise Unauthorized("API key belongs to another user")
        if key.revoked_at is not None:
            return key
        now = clock.now_ms()
        store.revoke_key(key_id, now)
    return dataclasses.replace(key, revoked_at=now)
