"""The ``memsvc`` command: serve, set up and maintain a memsvc deployment.

Commands read the same settings as the service (``memsvc settings`` shows
them) and work on its database directly; none needs the service running,
and ``reembed`` refuses to run while it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import typing as t

import click

from . import __version__
from . import clock
from . import settings as settings_table
from . import tokens
from .embeddings import Embedder
from .embeddings import make_embedder
from .errors import ApiError
from .errors import ConfigError
from .limits import MAX_CONCURRENT
from .limits import MAX_PER_MINUTE
from .observability import audit
from .observability import logs
from .runtime import Runtime
from .services import evaluation
from .services import info as info_service
from .services import keys as key_service
from .services import reembedding
from .services import transfer
from .store import SCHEMA_VERSION
from .store import BackupError
from .store import BackupRefused
from .store import DatabaseInUse
from .store import FullStore
from .store import open_backend
from .store.schema import IncompleteSchema
from .store.schema import StoreMismatch
from .store.schema import check_recorded
from .text import InvalidText
from .text import check_text
from .text import shown


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

    def store(self) -> FullStore:
        return self.runtime().store()


pass_context = click.make_pass_decorator(Context, ensure=True)


def _audit(ctx: Context, action: str, tenant: str | None, **details: t.Any) -> None:
    """One audit line for an administrative command: on stderr, and in MEMSVC_AUDIT_LOG."""
    logs.configure(ctx.settings()["LOG_FORMAT"])
    audit.configure(ctx.settings()["AUDIT_LOG"])
    audit.record(action, audit.operator(), tenant, **details)


def _text_argument(name: str, value: str, max_chars: int) -> str:
    try:
        check_text(value, max_chars, printable=True)
    except InvalidText as e:
        raise click.BadParameter(str(e), param_hint=name) from None
    return value


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else words or word + 's'}"


class Progress:
    """click's progress bar on stderr, fed the count done so far; silent unless a terminal."""

    def __init__(self, label: str, stream: t.TextIO | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.bar: t.Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = click.progressbar(
                length=total, label=self.label, file=self.stream, show_pos=True, show_eta=True
            )
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.render_finish()


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
    click.echo(f"Database ready: {settings_table.database_shown(ctx.settings()['DATABASE'])}")
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
    # fail with a traceback on some (WEB_CONCURRENCY=abc). So is the model's
    # package: making the embedder finds it, loading nothing yet.
    try:
        make_embedder(ctx.settings())
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    from .serving import config
    from .serving.run import Server

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
        f"Backed up {_plural(counts['memories'], 'memory', 'memories')} and "
        f"{_plural(counts['api_keys'], 'API key')} to {path} "
        f"({counts['bytes'] / 1e6:.1f} MB, {time.monotonic() - started:.1f} s); "
        "integrity check ok."
    )


@cli.command("export")
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
    keys = f" and {_plural(n.api_keys, 'API key')}" if n.api_keys else ""
    click.echo(f"Exported {_plural(n.memories, 'memory', 'memories')}{keys}.", err=True)


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


@cli.command("import")
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
    _audit(
        ctx, "import", None if all_tenants else ",".join(tenants) or header.get("tenant"),
        file=os.path.basename(path), memories=result.imported, keys=result.keys_imported,
    )  # fmt: skip
    notes = []
    if result.existing:
        notes.append(f"{_plural(result.existing, 'memory', 'memories')} already there")
    if result.keys_existing:
        notes.append(f"{_plural(result.keys_existing, 'API key')} already there")
    if result.expired:
        notes.append(f"{result.expired:,} expired")
    if result.reembedded:
        notes.append(f"embedded again with {rt.embedder.model_id}")
    keys = ""
    if result.keys_imported or result.keys_existing:
        keys = f" and {_plural(result.keys_imported, 'API key')}"
    click.echo(
        f"Imported {_plural(result.imported, 'memory', 'memories')}{keys}"
        + (f" ({'; '.join(notes)})" if notes else "")
        + ".",
        err=True,
    )


def _read_only_store(ctx: Context) -> tuple[FullStore, Embedder]:
    """The configured database and embedder, checked but never created, migrated or written.

    No search cache either: a large user's cache writes snapshot files.
    """
    settings = {**ctx.settings(), "SEARCH_CACHE_MB": 0}
    rt = Runtime(settings, ctx.instance)
    if ctx.embedder is not None:
        rt.embedder = ctx.embedder
    click.get_current_context().call_on_close(rt.close)
    shown_db = settings_table.database_shown(settings["DATABASE"])
    if not rt.backend.exists():
        raise click.ClickException(f"no database at {shown_db}: nothing to evaluate")
    try:
        store = rt.store()
        store.check_schema()
        check_recorded(store.embedder(), rt.embedder.model_id, rt.embedder.dimensions)
    except IncompleteSchema as e:
        raise click.ClickException(
            f"{shown_db} is not a memsvc database of this version ({e}); "
            "`memsvc init-db` creates or upgrades one"
        ) from None
    except StoreMismatch as e:
        raise click.ClickException(f"{shown_db}: {e}") from None
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    return store, rt.embedder


@cli.command("eval")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--tenant", required=True, help="The tenant whose end users the questions ask about.")
@click.option(
    "--limit",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="The limit of each search, as the application sets it.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="Also write every figure, and each question's rank per mode, to this file (- for stdout).",
)
@pass_context
def eval_command(ctx: Context, path: str, tenant: str, limit: int, json_path: str | None) -> None:
    """Measure search on your own questions: hit@1/5/10 and MRR per mode and threshold.

    PATH holds one question per line (JSON Lines):

    \b
      {"userId": "u-17", "query": "where does Ana work now?",
       "expected": ["<memory id>", "<exact text of a memory>"]}

    Each question is searched as memory.search searches it, among the
    memories of its userId in --tenant, with the configured database and
    embedding model, in each mode (semantic, keyword, hybrid) and at each
    threshold from 0 to 0.7 in steps of 0.05 (and the default and
    recommended thresholds). Prints, per mode, hit@k (the share of
    questions with an expected memory among the first k results) and MRR
    (the mean of 1/rank of the first one), then per threshold what a call
    would return: hit@k, how many results it keeps and how many of those are
    not expected. Nothing is written to the database; the service may be
    running.
    """
    try:
        tokens.check_tenant(tenant)
    except InvalidText as e:
        raise click.BadParameter(str(e), param_hint="--tenant") from None
    values = ctx.settings()
    try:
        with click.open_file(path, encoding="utf-8") as f:
            questions = evaluation.read_questions(
                f,
                max_user_id_chars=values["MAX_USER_ID_CHARS"],
                max_query_chars=values["MAX_CONTENT_CHARS"],
            )
    except (evaluation.InvalidQuestions, UnicodeDecodeError) as e:
        raise click.ClickException(f"{path}: {e}") from None
    store, embedder = _read_only_store(ctx)
    default = values["SEARCH_DEFAULT_THRESHOLD"]
    recommended = info_service.recommended_threshold(embedder, values)
    marks = {default: "default (MEMSVC_SEARCH_DEFAULT_THRESHOLD)"}
    if recommended is not None:
        marks[recommended] = (
            "recommended for this model"
            if recommended != default
            else marks[default] + ", recommended for this model"
        )
    bar = Progress("evaluating")
    try:
        report = evaluation.evaluate(
            store, embedder, tenant, questions, limit=limit,
            thresholds=[*evaluation.THRESHOLDS, *marks], progress=bar,
        )  # fmt: skip
    except evaluation.InvalidQuestions as e:
        raise click.ClickException(f"{path}: {e}") from None
    except ApiError as e:
        raise click.ClickException(e.message) from None
    bar.close()
    for line, item in report.missing:
        click.echo(
            f"warning: line {line}: {_excerpt(item)} is neither the id nor the exact text "
            "of a memory of that user: no search can return it",
            err=True,
        )
    _print_report(report, embedder.model_id, marks)
    if json_path is not None:
        document = json.dumps(report.as_json(), indent=2, ensure_ascii=False) + "\n"
        with click.open_file(json_path, "w", encoding="utf-8") as out:
            out.write(document)
        if json_path != "-":
            click.echo(f"(every figure written to {json_path})", err=True)


def _excerpt(text: str, chars: int = 60) -> str:
    """A quoted, terminal-safe start of ``text``."""
    return '"' + shown(text if len(text) <= chars else text[: chars - 1] + "…") + '"'


def _print_report(report: evaluation.Report, model: str, marks: dict[float, str]) -> None:
    ks = report.ks
    hits = "".join(f"{f'hit@{k}':>8}" for k in ks)
    click.echo(
        f"{_plural(report.questions, 'question')} of tenant {report.tenant}, "
        f"{model}, limit {report.limit}"
    )
    click.echo(f"\nRanking (threshold 0)\n{'mode':10}{hits}{'MRR':>8}")
    for mode, figures in report.ranking.items():
        row = "".join(f"{figures.hits[k]:8.3f}" for k in ks)
        click.echo(f"{mode:10}{row}{figures.mrr:8.3f}")
    for mode, by_threshold in report.sweep.items():
        click.echo(
            f"\n{mode}: a call with each threshold (limit {report.limit})\n"
            f"{'threshold':>9}{hits}{'kept':>8}{'not expected':>14}"
        )
        for threshold, figures in by_threshold.items():
            row = "".join(f"{figures.hits[k]:8.3f}" for k in ks)
            mark = f"  <- {marks[threshold]}" if threshold in marks else ""
            click.echo(f"{threshold:9.2f}{row}{figures.kept:8.2f}{figures.unexpected:14.2f}{mark}")
    mode, threshold, figures = evaluation.best(report)
    k = 5 if 5 in ks else ks[-1]
    click.echo(
        f"\nHighest hit@{k}: {mode} at threshold {threshold:.2f} (hit@{k} "
        f"{figures.hits[k]:.3f}; {figures.kept:.2f} results a call, "
        f"{figures.unexpected:.2f} of them not expected)."
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
    _audit(ctx, "keys.create", tenant, key_id=created.key.id)
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
    _audit(ctx, "keys.set-limits", key.tenant, key_id=key.id, per_minute=per_minute,
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
    _audit(ctx, "keys.revoke", key.tenant, key_id=key.id)
    assert key.revoked_at is not None
    click.echo(
        f"Revoked {shown(key.name)!r} of tenant {shown(key.tenant)!r} "
        f"at {clock.iso(key.revoked_at)}."
    )


def main() -> None:
    cli.main(prog_name="memsvc")


if __name__ == "__main__":
    main()
