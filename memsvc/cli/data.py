"""The database as a whole: ``reembed``, ``backup``, ``export``, ``import``."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import typing as t

import click

from .. import tokens
from ..runtime import Runtime
from ..services import reembedding
from ..services import transfer
from ..store import BackupError
from ..store import BackupRefused
from ..store import DatabaseInUse
from ..store import open_backend
from ..text import InvalidText
from .context import Context
from .context import Progress
from .context import audit_command
from .context import pass_context
from .context import plural


@click.command("reembed")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@pass_context
def reembed(ctx: Context, batch_size: int) -> None:
    """Re-embed every memory with the configured embedder (stop the service first)."""
    rt = ctx.runtime()
    try:
        rt.backend.exclusive()
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
    total = store.count_memories(None, None, 0)
    bar = Progress("re-embedding")
    done = reembedding.reembed(
        store, rt.embedder, batch_size=batch_size, progress=lambda n: bar(n, total)
    )
    bar.close()
    click.echo(
        f"Done: {plural(done, 'memory', 'memories')} now use {rt.embedder.model_id}.", err=True
    )


@click.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
@pass_context
def backup(ctx: Context, path: str, force: bool) -> None:
    """Copy the database to PATH, consistently, while the service runs.

    To restore: stop memsvc, put the copy at MEMSVC_DATABASE (removing any
    -wal and -shm files beside it), start memsvc.
    """
    backend = ctx.runtime().backend
    started = time.monotonic()
    try:
        counts = backend.backup(path, replace=force)
    except BackupRefused as e:
        raise click.ClickException(str(e)) from None
    except FileExistsError:
        raise click.ClickException(f"{path} exists; choose another path or pass --force") from None
    except (BackupError, OSError) as e:
        raise click.ClickException(f"backup failed: {e}") from None
    click.echo(
        f"Backed up {plural(counts['memories'], 'memory', 'memories')} and "
        f"{plural(counts['api_keys'], 'API key')} to {path} "
        f"({counts['bytes'] / 1e6:.1f} MB, {time.monotonic() - started:.1f} s); "
        "integrity check ok."
    )


@click.command("export")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@click.option("--tenant", default=None, help="Only this tenant's memories.")
@click.option("--user", "user_id", default=None, help="Only this end user's memories.")
@pass_context
def export_command(ctx: Context, path: str, tenant: str | None, user_id: str | None) -> None:
    """Write memories, with their history and vectors, to PATH as JSON Lines (- for stdout).

    A consistent snapshot, taken while the service runs. `memsvc import`
    reads it back, here or into another database. The API keys of the
    database (or of --tenant) go too, as their hashes, so that callers keep
    their keys after a move; an export of one --user carries none.
    """
    store = ctx.store()
    bar = Progress("exporting")
    if path == "-":
        n = transfer.export(store, sys.stdout, tenant=tenant, user_id=user_id, progress=bar)
    else:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise click.ClickException(f"export failed: the folder {folder} does not exist")
        tmp = f"{path}.partial"
        # Private: the file holds every memory it exports.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            n = transfer.export(store, out, tenant=tenant, user_id=user_id, progress=bar)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    bar.close()
    keys = f" and {plural(n.api_keys, 'API key')}" if n.api_keys else ""
    click.echo(f"Exported {plural(n.memories, 'memory', 'memories')}{keys}.", err=True)


class _NewDatabase:
    """A database a command is about to create, removed again if the command fails.

    Made before the command's runtime creates the database; :meth:`watch`
    once it has. If the command then fails (it never reached :meth:`keep`)
    and wrote nothing to the database, the database goes with what was made
    for it (:meth:`~memsvc.store.Backend.remove`) and an instance folder
    made for it (if nothing else is in it): a refused import leaves nothing
    behind. Only a SQLite file is ever new: memsvc never creates a
    PostgreSQL database.
    """

    def __init__(self, ctx: Context):
        self.new = not open_backend(ctx.settings(), ctx.instance).exists()
        self.instance = None if os.path.lexists(ctx.instance) else ctx.instance
        self.kept = False

    def watch(self, rt: Runtime) -> None:
        if self.new:
            # Runs before the runtime's own close (click closes in reverse order).
            click.get_current_context().call_on_close(lambda: self._discard(rt))

    def keep(self) -> None:
        self.kept = True

    def _discard(self, rt: Runtime) -> None:
        if self.kept or not self.new:
            return
        try:
            store = rt.store()
            if store.count_memories(None, None, 0) or store.list_keys():
                return  # written to: an interrupted import carries on from here
        except Exception:
            return  # what it holds is unknown: it stays
        rt.close()
        rt.backend.remove()
        if self.instance is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self.instance)  # only if empty


def _import_scope(
    header: dict[str, t.Any], tenants: tuple[str, ...], all_tenants: bool
) -> t.Iterable[str] | None:
    """The tenants an import may write (None: all of the file's)."""
    if all_tenants:
        return None
    if tenants:
        return tenants
    if header.get("tenant") is not None:
        return [header["tenant"]]
    raise transfer.InvalidImport(
        "the file holds every tenant's data (its header's tenant is null): name the "
        "tenants to import with --tenant, or pass --all-tenants to import every one"
    )


@click.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tenant",
    "tenants",
    multiple=True,
    metavar="NAME",
    help="Import this tenant's memories and keys; repeat it for several. "
    "Default: the tenant of the file's header (an export of one tenant).",
)
@click.option(
    "--all-tenants",
    is_flag=True,
    help="Import every tenant the file holds, trusting the file (a whole database's export).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=transfer.IMPORT_BATCH,
    show_default=True,
    help="Memories written per transaction.",
)
@click.option(
    "--max-line-chars",
    type=click.IntRange(min=1),
    default=transfer.MAX_LINE_CHARS,
    show_default=True,
    help="Refuse a longer line before parsing it (a memory with a long history may need more).",
)
@pass_context
def import_command(
    ctx: Context,
    path: str,
    tenants: tuple[str, ...],
    all_tenants: bool,
    batch_size: int,
    max_line_chars: int,
) -> None:
    """Import memories (and API keys) from a file `memsvc export` wrote.

    Only the tenants named are written: those given with --tenant (repeat it
    for several), or else the tenant of the file's header (an export of one
    tenant). A whole database's export names no tenant and is refused
    unless --tenant names the tenants to take or --all-tenants says to take
    every tenant the file holds. A memory or key of any other tenant is
    refused, and nothing is imported.

    The whole file is checked first, by the rules the API applies (text
    and metadata limits, ids, timestamps, key names and limits, the
    per-tenant key cap): a line that breaks one is reported with its number
    and nothing is imported. Memories and keys the database already has are
    skipped, so running it again after an interruption carries on. Text is
    embedded again when the file's vectors come from another model.
    """
    if tenants and all_tenants:
        raise click.UsageError("give --tenant or --all-tenants, not both")
    for name in tenants:
        try:
            tokens.check_tenant(name)
        except InvalidText as e:
            raise click.BadParameter(str(e), param_hint="--tenant") from None
    new_database = _NewDatabase(ctx)
    rt = ctx.runtime()
    new_database.watch(rt)
    store = rt.store()
    # One open file for both readings: the import reads the file the check read.
    with open(path, encoding="utf-8") as f:
        try:
            header = transfer.read_header(next(transfer.read_lines(f, max_line_chars), ""))
            limits = transfer.Rules.from_settings(
                ctx.settings(), _import_scope(header, tenants, all_tenants)
            )
            f.seek(0)
            checked = transfer.check(store, transfer.read_lines(f, max_line_chars), limits)
        except (transfer.InvalidImport, UnicodeDecodeError) as e:
            raise click.ClickException(f"{path}: {e}; nothing was imported") from None
        f.seek(0)
        bar = Progress("importing")
        try:
            result = transfer.import_(
                store,
                rt.embedder,
                transfer.read_lines(f, max_line_chars),
                checked,
                limits,
                batch_size=batch_size,
                progress=bar,
            )
        except transfer.InvalidImport as e:
            raise click.ClickException(f"{path}: {e}") from None
    new_database.keep()
    bar.close()
    audit_command(
        ctx, "import", None if all_tenants else ",".join(tenants) or header.get("tenant"),
        file=os.path.basename(path), memories=result.imported, keys=result.keys_imported,
    )  # fmt: skip
    notes = []
    if result.existing:
        notes.append(f"{plural(result.existing, 'memory', 'memories')} already there")
    if result.keys_existing:
        notes.append(f"{plural(result.keys_existing, 'API key')} already there")
    if result.expired:
        notes.append(f"{result.expired:,} expired")
    if result.reembedded:
        notes.append(f"embedded again with {rt.embedder.model_id}")
    keys = ""
    if result.keys_imported or result.keys_existing:
        keys = f" and {plural(result.keys_imported, 'API key')}"
    click.echo(
        f"Imported {plural(result.imported, 'memory', 'memories')}{keys}"
        + (f" ({'; '.join(notes)})" if notes else "")
        + ".",
        err=True,
    )
