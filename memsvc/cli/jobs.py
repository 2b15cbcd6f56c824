"""``jobs``: extraction jobs, seen, retried, run and queued again by the operator."""

from __future__ import annotations

import click

from .. import wire
from ..errors import ApiError
from ..models import JOB_STATUSES
from ..services import jobs as job_service
from .context import Context
from .context import audit_command
from .context import pass_context
from .context import plural


@click.group("jobs")
def jobs() -> None:
    """Extraction jobs: list, retry, run, re-extract."""


@jobs.command("list")
@click.argument("tenant")
@click.option("--user", "user_id", default=None, help="Only this end user's jobs.")
@click.option("--status", type=click.Choice(JOB_STATUSES), default=None)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@pass_context
def jobs_list(
    ctx: Context, tenant: str, user_id: str | None, status: str | None, limit: int
) -> None:
    """List TENANT's jobs, newest first: id, status, attempts, user, facts or error."""
    found = job_service.page(ctx.store(), tenant, limit, user_id=user_id, status=status)
    if not found:
        click.echo("No jobs.", err=True)
        return
    for job in found:
        if job.facts is not None:
            outcome = (
                f"+{len(job.facts['added'])} facts, {len(job.facts['superseded'])} superseded, "
                f"{job.facts['unchanged']} unchanged"
            )
        else:
            outcome = job.error or ""
        click.echo(
            f"{job.id}  {job.status:<7}  {job.attempts}  {wire.timestamp(job.created_at)}  "
            f"{job.user_id}  {job.prompt_tokens + job.completion_tokens} tokens  {outcome}"
        )


@jobs.command("retry")
@click.argument("tenant")
@click.argument("job_ids", nargs=-1)
@click.option("--failed", "all_failed", is_flag=True, help="Every failed job of TENANT.")
@pass_context
def jobs_retry(ctx: Context, tenant: str, job_ids: tuple[str, ...], all_failed: bool) -> None:
    """Queue failed jobs of TENANT again (JOB_IDS, or --failed for all of them)."""
    store = ctx.store()
    ids = list(job_ids)
    if all_failed:
        while page := job_service.page(store, tenant, 1000, status="failed"):
            ids += [job.id for job in page]
            if len(page) < 1000:
                break
    if not ids:
        raise click.UsageError("name the jobs to retry, or give --failed")
    for job_id in ids:
        try:
            job = job_service.retry(store, tenant, job_id)
        except ApiError as e:
            raise click.ClickException(f"{job_id}: {e.message}") from None
        click.echo(f"{job.id}  {job.status}")
    audit_command(ctx, "jobs.retry", tenant, jobs=len(ids))


@jobs.command("reextract")
@click.argument("tenant")
@click.option("--user", "user_id", default=None, help="Only this end user's messages.")
@pass_context
def jobs_reextract(ctx: Context, tenant: str, user_id: str | None) -> None:
    """Draw facts again from TENANT's (or one user's) messages, after a model or prompt change.

    A job per session is queued; as each is applied, the facts drawn from
    its messages before are superseded by the new ones (their history
    kept).
    """
    queued = job_service.reextract(ctx.store(), tenant, user_id)
    audit_command(ctx, "jobs.reextract", tenant, user_id=user_id, jobs=len(queued))
    click.echo(f"Queued {plural(len(queued), 'job')}.", err=True)


@jobs.command("run")
@pass_context
def jobs_run(ctx: Context) -> None:
    """Run the due jobs in this process until none is left (the workers do it too)."""
    extraction = ctx.runtime().extraction
    if extraction is None:
        raise click.ClickException("no language model is configured (MEMSVC_LLM_URL)")
    ran = extraction.run_due()
    click.echo(f"Ran {plural(ran, 'job')}.", err=True)
