"""``keys``: API keys managed by the operator (the keys router does this for tenants)."""

from __future__ import annotations

import click

from .. import clock
from .. import tokens
from ..errors import ApiError
from ..limits import MAX_CONCURRENT
from ..limits import MAX_PER_MINUTE
from ..services import keys as key_service
from ..text import InvalidText
from ..text import shown
from .context import Context
from .context import audit_command
from .context import pass_context
from .context import text_argument


@click.group("keys")
def keys() -> None:
    """Manage API keys (the keys router does this for tenants)."""


@keys.command("create")
@click.argument("tenant")
@click.argument("name")
@pass_context
def keys_create(ctx: Context, tenant: str, name: str) -> None:
    """Create an API key for TENANT; prints its secret, once, on stdout."""
    try:
        tokens.check_tenant(tenant)
    except InvalidText as e:
        raise click.BadParameter(str(e), param_hint="TENANT") from None
    text_argument("NAME", name, ctx.settings()["MAX_NAME_CHARS"])
    created = key_service.create(ctx.store(), tenant, name, ctx.settings()["API_KEY_WORD"])
    audit_command(ctx, "keys.create", tenant, key_id=created.key.id)
    click.echo(
        f"Created API key {created.key.name!r} for tenant {tenant!r} "
        f"(id {created.key.id}). Its secret is shown only now:",
        err=True,
    )
    click.echo(created.secret)


def _limit_text(own: int | None, default: int) -> str:
    value = default if own is None else own
    shown = "unlimited" if value == 0 else str(value)
    return f"{shown} (default)" if own is None else shown


@keys.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@pass_context
def keys_list(ctx: Context, tenant: str | None) -> None:
    """List API keys (never their secrets) with their limits."""
    rows = key_service.list_for(ctx.store(), tenant)
    if not rows:
        click.echo("No API keys.", err=True)
        return
    defaults = ctx.runtime().default_limits
    header = (
        "ID", "TENANT", "IDP KEY ID", "NAME", "CREATED", "LAST USED", "REVOKED",
        "PER MINUTE", "CONCURRENT",
    )  # fmt: skip
    table = [header] + [
        (
            k.id,
            shown(k.tenant),
            k.key_id,
            shown(k.name),
            clock.iso(k.created_at),
            clock.iso(k.last_used_at) if k.last_used_at else "-",
            clock.iso(k.revoked_at) if k.revoked_at else "-",
            _limit_text(k.per_minute, defaults.per_minute),
            _limit_text(k.concurrent, defaults.concurrent),
        )
        for k in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


@keys.command("set-limits")
@click.argument("key_id")
@click.option(
    "--per-minute",
    type=click.IntRange(0, MAX_PER_MINUTE),
    default=None,
    help="Calls per rolling 60 s (0: unlimited).",
)
@click.option(
    "--concurrent",
    type=click.IntRange(0, MAX_CONCURRENT),
    default=None,
    help="Calls executing at once (0: unlimited).",
)
@click.option(
    "--reset", is_flag=True, help="The key's ceiling back to the global MEMSVC_* settings."
)
@pass_context
def keys_set_limits(
    ctx: Context, key_id: str, per_minute: int | None, concurrent: int | None, reset: bool
) -> None:
    """Give the key with record id KEY_ID its own limits; they apply at once.

    They are a ceiling: its tenant may lower them (keys.setLimits), never raise them.
    """
    store = ctx.store()
    current = store.get_key(key_id)
    if current is None:
        raise click.ClickException("API key not found")
    if reset:
        per_minute = concurrent = None
    elif per_minute is None and concurrent is None:
        raise click.UsageError("give --per-minute, --concurrent, or --reset")
    else:
        per_minute = current.rate_ceiling if per_minute is None else per_minute
        concurrent = current.concurrency_ceiling if concurrent is None else concurrent
    try:
        key = key_service.set_limits(store, key_id, per_minute, concurrent)
    except ApiError as e:
        raise click.ClickException(e.message) from None
    audit_command(ctx, "keys.set-limits", key.tenant, key_id=key.id, per_minute=per_minute,
           concurrent=concurrent)  # fmt: skip
    defaults = ctx.runtime().default_limits
    click.echo(
        f"{shown(key.name)!r} of tenant {shown(key.tenant)!r}: "
        f"{_limit_text(key.per_minute, defaults.per_minute)} per minute, "
        f"{_limit_text(key.concurrent, defaults.concurrent)} concurrent."
    )


@keys.command("revoke")
@click.argument("key_id")
@pass_context
def keys_revoke(ctx: Context, key_id: str) -> None:
    """Revoke the key with record id KEY_ID; it stops working at once."""
    try:
        key = key_service.revoke(ctx.store(), None, key_id)
    except ApiError as e:
        raise click.ClickException(e.message) from None
    audit_command(ctx, "keys.revoke", key.tenant, key_id=key.id)
    assert key.revoked_at is not None
    click.echo(
        f"Revoked {shown(key.name)!r} of tenant {shown(key.tenant)!r} "
        f"at {clock.iso(key.revoked_at)}."
    )
