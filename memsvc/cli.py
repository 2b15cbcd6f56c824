"""The ``memsvc`` command: serve, set up and maintain a memsvc deployment.

Commands read the same settings as the service (``memsvc settings`` shows
them) and work on its database directly; none needs the service running,
and ``reembed`` refuses to run while it is.
"""

from __future__ import annotations

import dataclasses
import os
import time
import typing as t

import click

from . import __version__
from . import clock
from . import settings as settings_table
from . import tokens
from .embeddings import Embedder
from .errors import ApiError
from .errors import ConfigError
from .limits import MAX_CONCURRENT
from .limits import MAX_PER_MINUTE
from .runtime import DatabaseInUse
from .runtime import Runtime
from .services import keys as key_service
from .services import maintenance
from .store import SCHEMA_VERSION
from .store import Store
from .text import InvalidText
from .text import check_text


@dataclasses.dataclass
class Context:
    """Where the command's settings come from; tests point it at their own."""

    instance_path: str | None = None
    overrides: t.Mapping[str, t.Any] | None = None
    #: An embedder to use instead of the configured one (tests).
    embedder: Embedder | None = None
    _settings: dict[str, t.Any] | None = None
    _runtime: Runtime | None = None

    @property
    def instance(self) -> str:
        return self.instance_path or settings_table.default_instance_path()

    def settings(self) -> dict[str, t.Any]:
        if self._settings is None:
            try:
                self._settings, warnings = settings_table.load(self.instance, self.overrides)
            except ConfigError as e:
                raise click.ClickException(str(e)) from None
            for warning in warnings:
                click.echo(f"warning: {warning}", err=True)
        return self._settings

    def runtime(self) -> Runtime:
        """The database, created or migrated; of any model (that is what reembed is for)."""
        if self._runtime is None:
            try:
                rt = Runtime(self.settings(), self.instance)
                if self.embedder is not None:
                    rt.embedder = self.embedder
                rt.prepare(check_embedder=False)
            except ConfigError as e:
                raise click.ClickException(str(e)) from None
            self._runtime = rt
            click.get_current_context().call_on_close(rt.close)
        return self._runtime

    def store(self) -> Store:
        return self.runtime().store()


pass_context = click.make_pass_decorator(Context, ensure=True)


def _text_argument(name: str, value: str, max_chars: int) -> str:
    try:
        check_text(value, max_chars)
    except InvalidText as e:
        raise click.BadParameter(str(e), param_hint=name) from None
    return value


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else words or word + 's'}"


@click.group(help="memsvc: long-term memory for AI applications.")
@click.version_option(__version__, "--version", prog_name="memsvc", message="%(prog)s %(version)s")
def cli() -> None:
    pass


@cli.command("init-db")
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
    click.echo(f"Database ready: {ctx.settings()['DATABASE']}")
    click.echo(f"  schema version {SCHEMA_VERSION}, vectors from {model} ({dims} dimensions)")
    values = ctx.settings()
    if not (values["OIDC_ISSUER"] or values["JWKS_URL"] or values["JWT_SECRET"]):
        path = tokens.create_secret_file(ctx.instance)
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


@cli.command("run")
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
    # fail with a traceback on some (WEB_CONCURRENCY=abc).
    ctx.settings()
    from .serving import config
    from .serving.run import Server

    address = bind or config.bind[0]
    click.echo(
        f"memsvc: serving on http://{address}\n"
        f"  health:       curl http://{address}/health\n"
        f"  get a key:    memsvc keys create <tenant> <key-name>\n"
        f"  stop:         Ctrl-C\n",
        err=True,
    )
    Server({"bind": [bind] if bind else None, "workers": workers, "threads": threads}).run()


@cli.command("settings")
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


@cli.command("reembed")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@pass_context
def reembed(ctx: Context, batch_size: int) -> None:
    """Re-embed every memory with the configured embedder (stop the service first)."""
    rt = ctx.runtime()
    try:
        rt.exclusive()
    except DatabaseInUse as e:
        raise click.ClickException(str(e)) from None
    store = rt.store()
    before = store.embedder()
    assert before is not None
    click.echo(
        f"Re-embedding with {rt.embedder.model_id} ({rt.embedder.dimensions} dimensions); "
        f"the database has vectors from {before[0]} ({before[1]} dimensions).",
        err=True,
    )
    done = maintenance.reembed(
        store,
        rt.embedder,
        batch_size=batch_size,
        progress=lambda n: click.echo(f"  {_plural(n, 'memory', 'memories')} embedded", err=True),
    )
    click.echo(
        f"Done: {_plural(done, 'memory', 'memories')} now use {rt.embedder.model_id}.", err=True
    )


@cli.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
@pass_context
def backup(ctx: Context, path: str, force: bool) -> None:
    """Copy the database to PATH, consistently, while the service runs.

    To restore: stop memsvc, put the copy at MEMSVC_DATABASE (removing any
    -wal and -shm files beside it), start memsvc.
    """
    from .store.backup import BackupError
    from .store.backup import backup as copy

    if os.path.exists(path) and not force:
        raise click.ClickException(f"{path} exists; choose another path or pass --force")
    started = time.monotonic()
    try:
        counts = copy(ctx.store().conn, path)
    except (BackupError, OSError) as e:
        raise click.ClickException(f"backup failed: {e}") from None
    click.echo(
        f"Backed up {_plural(counts['memories'], 'memory', 'memories')} and "
        f"{_plural(counts['api_keys'], 'API key')} to {path} "
        f"({counts['bytes'] / 1e6:.1f} MB, {time.monotonic() - started:.1f} s); "
        "integrity check ok."
    )


@cli.group("keys")
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
    _text_argument("NAME", name, ctx.settings()["MAX_NAME_CHARS"])
    created = key_service.create(ctx.store(), tenant, name, ctx.settings()["API_KEY_WORD"])
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
@pass_context
def keys_set_limits(
    ctx: Context, key_id: str, per_minute: int | None, concurrent: int | None, reset: bool
) -> None:
    """Give the key with record id KEY_ID its own limits; they apply at once."""
    store = ctx.store()
    current = store.get_key(key_id)
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
        key = key_service.set_limits(store, key_id, per_minute, concurrent)
    except ApiError as e:
        raise click.ClickException(e.message) from None
    defaults = ctx.runtime().default_limits
    click.echo(
        f"{key.name!r} of tenant {key.tenant!r}: "
        f"{_limit_text(key.rate_limit, defaults.per_minute)} per minute, "
        f"{_limit_text(key.concurrency_limit, defaults.concurrent)} concurrent."
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
    assert key.revoked_at is not None
    click.echo(f"Revoked {key.name!r} of tenant {key.tenant!r} at {clock.iso(key.revoked_at)}.")


def main() -> None:
    cli.main(prog_name="memsvc")


if __name__ == "__main__":
    main()
