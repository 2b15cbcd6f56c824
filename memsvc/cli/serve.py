"""Setting up and serving: ``init-db``, ``token``, ``run``, ``settings``."""

from __future__ import annotations

import click

from .. import settings as settings_table
from .. import tokens
from ..embeddings import make_embedder
from ..errors import ConfigError
from ..store import SCHEMA_VERSION
from ..text import InvalidText
from .context import Context
from .context import pass_context


@click.command("init-db")
@pass_context
def init_db(ctx: Context) -> None:
    """Create or upgrade the database (the service also does this when it starts).

    With no identity provider or token secret configured, also creates the
    local token secret in the instance folder, for `memsvc token`.
    """
    store = ctx.store()
    recorded = store.embedder()
    assert recorded is not None  # just migrated
    model, dims = recorded
    click.echo(f"Database ready: {settings_table.database_shown(ctx.settings()['DATABASE'])}")
    click.echo(f"  schema version {SCHEMA_VERSION}, vectors from {model} ({dims} dimensions)")
    values = ctx.settings()
    if not (values["OIDC_ISSUER"] or values["JWKS_URL"] or values["JWT_SECRET"]):
        path = tokens.create_secret_file(ctx.instance)
        click.echo(f"Local token secret: {path} (mint tokens with: memsvc token <tenant>)")


@click.command("token")
@click.argument("tenant")
@click.option(
    "--ttl",
    type=click.IntRange(min=1),
    default=3600,
    show_default=True,
    help="Seconds until the token expires.",
)
@pass_context
def token(ctx: Context, tenant: str, ttl: int) -> None:
    """Print a token for TENANT, for the keys router (local token mode)."""
    try:
        tokens.check_tenant(tenant)
    except InvalidText as e:
        raise click.BadParameter(str(e), param_hint="TENANT") from None
    values = ctx.settings()
    if values["OIDC_ISSUER"] or values["JWKS_URL"]:
        raise click.ClickException(
            "tokens come from your identity provider (MEMSVC_OIDC_ISSUER / MEMSVC_JWKS_URL); "
            "memsvc token mints only local ones"
        )
    if not values["JWT_SECRET"]:
        tokens.create_secret_file(ctx.instance)
    verifier = tokens.make_verifier(values, ctx.instance)
    assert isinstance(verifier, tokens.LocalVerifier)
    click.echo(verifier.mint(tenant, ttl))


_BIND = settings_table.BY_NAME["BIND"]
_THREADS = settings_table.BY_NAME["THREADS"]


@click.command("run")
@pass_context
@click.option(
    "--bind",
    "-b",
    default=None,
    help=f"Address to listen on [{_BIND.env}, default {_BIND.describe_default()}].",
)
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes [WEB_CONCURRENCY, default one per core].",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help=f"Threads per worker [{_THREADS.env}, default {_THREADS.describe_default()}].",
)
def run(ctx: Context, bind: str | None, workers: int | None, threads: int | None) -> None:
    """Serve memsvc with gunicorn and its settings (memsvc/serving/config.py)."""
    if bind is not None and not _BIND.check(bind):
        raise click.BadParameter(f"must be {_BIND.expected}", param_hint="--bind")
    # Every setting is checked before gunicorn loads: gunicorn itself would
    # fail with a traceback on some (WEB_CONCURRENCY=abc). So is the model's
    # package: making the embedder finds it, loading nothing yet.
    try:
        make_embedder(ctx.settings())
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    from ..serving import config
    from ..serving.run import Server

    address = bind or config.bind[0]
    try:
        # Before saying where it serves: a busy address is the one thing said.
        config.check_bind(address)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    click.echo(
        f"memsvc: serving on http://{address}\n"
        f"  health:       curl http://{address}/health\n"
        f"  get a key:    memsvc keys create <tenant> <key-name>\n"
        f"  stop:         Ctrl-C\n",
        err=True,
    )
    Server({"bind": [bind] if bind else None, "workers": workers, "threads": threads}).run()


@click.command("settings")
@click.option("--markdown", is_flag=True, help="The settings table of docs/configuration.md.")
@pass_context
def show_settings(ctx: Context, markdown: bool) -> None:
    """Show every setting's effective value (secrets hidden)."""
    if markdown:
        click.echo(settings_table.markdown(), nl=False)
        return
    rows = settings_table.shown(ctx.settings())
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        click.echo(f"{name.ljust(width)}  {value}")
