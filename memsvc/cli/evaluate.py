"""``eval``: search measured on the operator's own questions, the database only read."""

from __future__ import annotations

import json

import click

from .. import settings as settings_table
from .. import tokens
from ..embeddings import Embedder
from ..errors import ApiError
from ..errors import ConfigError
from ..runtime import Runtime
from ..services import evaluation
from ..services import info as info_service
from ..store import FullStore
from ..store.schema import IncompleteSchema
from ..store.schema import StoreMismatch
from ..store.schema import check_recorded
from ..text import InvalidText
from ..text import shown
from .context import Context
from .context import Progress
from .context import pass_context
from .context import plural


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


@click.command("eval")
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
        f"{plural(report.questions, 'question')} of tenant {report.tenant}, "
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
