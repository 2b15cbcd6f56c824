"""The ``memsvc`` command: Flask's CLI group for the app, plus memsvc's commands."""

from __future__ import annotations

import sys

import click
from flask import Flask
from flask import current_app
from flask.cli import AppGroup
from flask.cli import FlaskGroup
from flask.cli import shell_command

from . import ConfigError
from . import clock
from . import create_app
from . import tokens
from .limits import MAX_CONCURRENT
from .limits import MAX_PER_MINUTE
from .runtime import runtime
from .runtime import store
from .services import keys as key_service
from .services import memories
from .store import SCHEMA_VERSION


def _app() -> Flask:
    # Maintenance commands must work on a database of another model (that
    # is what `reembed` is for), so they skip that check.
    try:
        return create_app(check_embedder=False)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None


cli = FlaskGroup(
    create_app=_app,
    add_default_commands=False,
    help="memsvc: long-term memory for AI applications.",
)
cli.add_command(shell_command)


@cli.command("init-db")
def init_db() -> None:
    """Create or upgrade the database (the app also does this when it starts).

    With no identity provider or token secret configured, also creates the
    local token secret in the instance folder, for `memsvc token`.
    """
    rt = runtime()
    model, dims = store().embedder()
    click.echo(f"Database ready: {rt.db.path}")
    click.echo(f"  schema version {SCHEMA_VERSION}, vectors from {model} ({dims} dimensions)")
    config = current_app.config
    if not (config["OIDC_ISSUER"] or config["JWKS_URL"] or config["JWT_SECRET"]):
        path = tokens.create_secret_file(current_app.instance_path)
        click.echo(f"Local token secret: {path} (mint tokens with: memsvc token <tenant>)")


@cli.command("token")
@click.argument("tenant")
@click.option(
    "--ttl",
    type=click.IntRange(min=1),
    default=3600,
    show_default=True,
    help="Seconds until the token expires.",
)
def token(tenant: str, ttl: int) -> None:
    """Print a token for TENANT, for the keys router (local token mode)."""
    config = current_app.config
    if config["OIDC_ISSUER"] or config["JWKS_URL"]:
        raise click.ClickException(
            "tokens come from your identity provider (MEMSVC_OIDC_ISSUER / MEMSVC_JWKS_URL); "
            "memsvc token mints only local ones"
        )
    if not config["JWT_SECRET"]:
        tokens.create_secret_file(current_app.instance_path)
    verifier = tokens.make_verifier(config, current_app.instance_path)
    click.echo(verifier.mint(tenant, ttl))


@cli.command("run", with_appcontext=False)
@click.option("--bind", "-b", default=None, help="Address to listen on [127.0.0.1:8000].")
@click.option("--workers", "-w", type=int, default=None, help="Worker processes [cores].")
@click.option("--threads", type=int, default=None, help="Threads per worker [4].")
def run(bind: str | None, workers: int | None, threads: int | None) -> None:
    """Serve memsvc with gunicorn and its settings in memsvc/gunicorn_config.py."""
    from . import gunicorn_config
    from .serve import Server

    address = bind or gunicorn_config.bind[0]
    click.echo(
        f"memsvc: serving on http://{address}\n"
        f"  health:       curl http://{address}/health\n"
        f"  get a key:    memsvc keys create <tenant> <key-name>\n",
        err=True,
    )
    Server({"bind": [bind] if bind else None, "workers": workers, "threads": threads}).run()


@cli.command("reembed")
@click.option("--batch-size", type=int, default=64, show_default=True)
def reembed(batch_size: int) -> None:
    """Re-embed every memory with the configured embedder (stop the service first)."""
    rt = runtime()
    s = store()
    before = s.embedder()
    click.echo(
        f"Re-embedding with {rt.embedder.model_id} ({rt.embedder.dimensions} dimensions); "
        f"the database has vectors from {before[0]} ({before[1]} dimensions).",
        err=True,
    )
    done = memories.reembed(
        s,
        rt.embedder,
        batch_size=batch_size,
        progress=lambda n: click.echo(f"  {n} memories embedded", err=True),
    )
    click.echo(f"Done: {done} memories now use {rt.embedder.model_id}.", err=True)


@cli.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
def backup(path: str, force: bool) -> None:
    """Copy the database to PATH, consistently, while the service runs.

    To restore: stop memsvc, put the copy at MEMSVC_DATABASE (removing any
    -wal and -shm files beside it), start memsvc.
    """
    import os
    import time

    if os.path.exists(path) and not force:
        raise click.ClickException(f"{path} exists; choose another path or pass --force")
    started = time.monotonic()
    try:
        counts = store().backup(path)
    except Exception as e:
        raise click.ClickException(f"backup failed: {e}") from None
    click.echo(
        f"Backed up {counts['memories']} memories and {counts['api_keys']} API keys to {path} "
        f"({counts['bytes'] / 1e6:.1f} MB, {time.monotonic() - started:.1f} s); "
        "integrity check ok."
    )


keys = AppGroup("keys", help="Manage API keys (the keys router does this for tenants).")
cli.add_command(keys)


@keys.command("create")
@click.argument("tenant")
@click.argument("name")
def keys_create(tenant: str, name: str) -> None:
    """Create an API key for TENANT; prints its secret, once, on stdout."""
    if not tenant.strip() or not name.strip():
        raise click.BadParameter("TENANT and NAME must not be empty")
    created = key_service.create(store(), tenant, name, current_app.config["API_KEY_WORD"])
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
def keys_list(tenant: str | None) -> None:
    """List API keys (never their secrets) with their limits."""
    rows = key_service.list_for(store(), tenant)
    if not rows:
        click.echo("No API keys.", err=True)
        return
    defaults = runtime().default_limits
    header = (
        "ID", "TENANT", "IDP KEY ID", "NAME", "CREATED", "LAST USED", "REVOKED",
        "PER MINUTE", "CONCURRENT",
    )  # fmt: skip
    table = [header] + [
        (
            k.id,
            k.tenant,
            k.key_id,
            k.name,
            clock.iso(k.created_at),
            clock.iso(k.last_used_at) if k.last_used_at else "-",
            clock.iso(k.revoked_at) if k.revoked_at else "-",
            _limit_text(k.rate_limit, defaults.per_minute),
            _limit_text(k.concurrency_limit, defaults.concurrent),
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
@click.option("--reset", is_flag=True, help="Back to the global MEMSVC_* settings.")
def keys_set_limits(
    key_id: str, per_minute: int | None, concurrent: int | None, reset: bool
) -> None:
    """Give the key with record id KEY_ID its own limits; they apply at once."""
    from .errors import ApiError

    s = store()
    current = s.get_key(key_id)
    if current is None:
        raise click.ClickException("API key not found")
    if reset:
        per_minute = concurrent = None
    elif per_minute is None and concurrent is None:
        raise click.UsageError("give --per-minute, --concurrent, or --reset")
    else:
        per_minute = current.rate_limit if per_minute is None else per_minute
        concurrent = current.concurrency_limit if concurrent is None else concurrent
    try:
        key = key_service.set_limits(s, key_id, per_minute, concurrent)
    except ApiError as e:
        raise click.ClickException(e.message) from None
    defaults = runtime().default_limits
    click.echo(
        f"{key.name!r} of tenant {key.tenant!r}: "
        f"{_limit_text(key.rate_limit, defaults.per_minute)} per minute, "
        f"{_limit_text(key.concurrency_limit, defaults.concurrent)} concurrent."
    )


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke the key with record id KEY_ID; it stops working at once."""
    from .errors import ApiError

    try:
        key = key_service.revoke(store(), None, key_id)
    except ApiError as e:
        raise click.ClickException(e.message) from None
    click.echo(f"Revoked {key.name!r} of tenant {key.tenant!r} at {clock.iso(key.revoked_at)}.")


def main() -> None:
    cli.main(prog_name="memsvc")


if __name__ == "__main__":
    sys.exit(main())
