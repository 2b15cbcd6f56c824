"""The console's jobs page: the tenant's extraction jobs, newest first (of a status, of a
user), a page at a time, and a failed one queued again."""

from __future__ import annotations

import typing as t

from flask import redirect
from flask import request
from werkzeug.wrappers import Response

from ...errors import ApiError
from ...models import JOB_STATUSES
from .pages import KEY
from .pages import bp
from .pages import call
from .pages import failure
from .pages import needs
from .pages import page
from .pages import url_with

#: Jobs on one page.
JOBS_PAGE = 50


@bp.get("/jobs")
@needs(KEY)
def jobs() -> Response:
    status = request.args.get("status", "")
    user_id = request.args.get("user", "")
    after = request.args.get("after") or None
    query = {"status": status, "user": user_id}

    def render(rows: list[dict[str, t.Any]], error: dict[str, t.Any] | None = None) -> Response:
        more = len(rows) > JOBS_PAGE
        rows = rows[:JOBS_PAGE]
        return page(
            "jobs.html",
            jobs=rows,
            chosen=status,
            user_id=user_id,
            statuses=JOB_STATUSES,
            error=error,
            retried=request.args.get("retried"),
            after=after,
            first_url=url_with("console.jobs", query) if after else None,
            next_url=url_with("console.jobs", {**query, "after": rows[-1]["id"]}) if more else None,
        )

    input: dict[str, t.Any] = {"limit": JOBS_PAGE + 1}
    if status:
        input["status"] = status
    if user_id:
        input["userId"] = user_id
    if after:
        input["cursor"] = after
    try:
        return call("memory.jobs", input, then=render)
    except ApiError as e:
        return render([], failure(e))


@bp.post("/jobs/retry")
@needs(KEY)
def retry_job() -> Response:
    job_id = request.form.get("id", "")
    try:
        call("memory.retryJob", {"id": job_id})
    except ApiError as e:
        return page("message.html", e.status, title="Not retried", message=e.message, back=None)
    # Back to the page it was sent from, saying which job went.
    kept = {name: request.form.get(name) for name in ("status", "user", "after")}
    return redirect(url_with("console.jobs", {**kept, "retried": job_id}))
