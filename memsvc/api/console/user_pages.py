"""The console's pages of end users and their memories: the tenant's users, one user's
memories (filtered, paged, all deleted at once) and conversations, one conversation's messages,
and one memory with its history, edited or deleted."""

from __future__ import annotations

import typing as t

from flask import redirect
from flask import request
from flask import url_for
from werkzeug.wrappers import Response

from ... import clock
from ...errors import ApiError
from ...services import jobs
from .. import outputs
from ..context import store
from . import diff
from .pages import KEY
from .pages import bp
from .pages import call
from .pages import failure
from .pages import iso_from_local
from .pages import json_field
from .pages import needs
from .pages import page
from .pages import position
from .pages import url_with

#: Memories on one user's page; end users on the users page.
PAGE_SIZE = 25
USERS_PAGE = 50
#: Sessions on one user's page; messages on a session's page.
SESSIONS_PAGE = 10
MESSAGES_PAGE = 50
#: A fact's sources, and the facts it replaced, shown on its page at most.
LINEAGE = 20
#: A session's page opened at a message starts this many messages before it.
LEAD_IN = 3

# -- end users -------------------------------------------------------------------------


@bp.get("/users")
@needs(KEY)
def users() -> Response:
    prefix = request.args.get("prefix", "")
    after = request.args.get("after")

    def render(rows: list[dict[str, t.Any]], error: dict[str, t.Any] | None = None) -> Response:
        more = len(rows) > USERS_PAGE
        rows = rows[:USERS_PAGE]
        return page(
            "users.html",
            rows=rows,
            prefix=prefix,
            after=after,
            next_after=rows[-1]["userId"] if more else None,
            error=error,
        )

    input: dict[str, t.Any] = {"limit": USERS_PAGE + 1, "prefix": prefix}
    if after:
        input["cursor"] = after
    try:
        return call("memory.users", input, then=render)
    except ApiError as e:
        return render([], failure(e))


@bp.get("/user")
@needs(KEY)
def user() -> Response:
    user_id = request.args.get("id", "")
    after = request.args.get("after") or None
    sessions_after = request.args.get("sessions") or None
    filter_text = request.args.get("filter", "").strip()
    created_from = request.args.get("from", "")
    created_to = request.args.get("to", "")
    query = {"id": user_id, "filter": filter_text, "from": created_from, "to": created_to}

    def render(
        memories: list[dict[str, t.Any]],
        sessions: list[dict[str, t.Any]],
        summary: dict[str, t.Any] | None,
        error: dict[str, t.Any] | None = None,
    ) -> Response:
        more = len(memories) > PAGE_SIZE
        memories = memories[:PAGE_SIZE]
        older = {**query, "after": memories[-1]["id"], "sessions": sessions_after} if more else None
        more_sessions = len(sessions) > SESSIONS_PAGE
        sessions = sessions[:SESSIONS_PAGE]
        here = {**query, "after": after}
        return page(
            "user.html",
            user_id=user_id,
            summary=summary,
            memories=memories,
            sessions=sessions,
            error=error,
            filter_text=filter_text,
            created_from=created_from,
            created_to=created_to,
            first_url=url_with("console.user", {**query, "sessions": sessions_after}),
            next_url=url_with("console.user", older) if older else None,
            paged=bool(after),
            sessions_paged=bool(sessions_after),
            first_sessions_url=url_with("console.user", here) + "#sessions",
            next_sessions_url=(
                url_with("console.user", {**here, "sessions": sessions[-1]["sessionId"]})
                + "#sessions"
                if more_sessions
                else None
            ),
            pretty=diff.pretty,
            now=clock.iso(clock.now_ms()),
        )

    input: dict[str, t.Any] = {"userId": user_id, "limit": PAGE_SIZE + 1}
    if after:
        input["cursor"] = after
    listed: dict[str, t.Any] = {"userId": user_id, "limit": SESSIONS_PAGE + 1}
    if sessions_after:
        listed["cursor"] = sessions_after
    try:
        if filter_text:
            input["filter"] = json_field("filter", filter_text)
        if created_from:
            input["createdAfter"] = iso_from_local(created_from)
        if created_to:
            input["createdBefore"] = iso_from_local(created_to)
        memories = call("memory.getAll", input)
        sessions = call("memory.sessions", listed)

        def summarised(found: list[dict[str, t.Any]]) -> Response:
            summary = found[0] if found and found[0]["userId"] == user_id else None
            return render(memories, sessions, summary)

        return call("memory.users", {"prefix": user_id, "limit": 1}, then=summarised)
    except ApiError as e:
        return render([], [], None, failure(e))


# -- one conversation ------------------------------------------------------------------


@bp.get("/session")
@needs(KEY)
def conversation() -> Response:
    """One session's messages in position order, a page at a time; ``at`` marks one of them."""
    user_id = request.args.get("user", "")
    session_id = request.args.get("id", "")
    try:
        after = position("after", request.args.get("after"))
        at = position("at", request.args.get("at"))
    except ApiError as e:
        return page("message.html", e.status, title="No such page", message=e.message, back=None)
    if after is None and at is not None and at > LEAD_IN:
        after = at - LEAD_IN - 1
    query = {"user": user_id, "id": session_id}

    def render(messages: list[dict[str, t.Any]]) -> Response:
        more = len(messages) > MESSAGES_PAGE
        messages = messages[:MESSAGES_PAGE]
        return page(
            "conversation.html",
            user_id=user_id,
            session_id=session_id,
            messages=messages,
            at=at,
            first_url=url_with("console.conversation", query) if after is not None else None,
            next_url=(
                url_with("console.conversation", {**query, "after": messages[-1]["position"]})
                if more
                else None
            ),
        )

    input: dict[str, t.Any] = {"userId": user_id, "sessionId": session_id}
    input["limit"] = MESSAGES_PAGE + 1
    if after is not None:
        input["after"] = after
    try:
        return call("memory.session", input, then=render)
    except ApiError as e:
        title = "No such session" if e.status == 404 else "Refused"
        return page("message.html", e.status, title=title, message=e.message, back=None)


@bp.post("/user/delete-all")
@needs(KEY)
def delete_all() -> Response:
    user_id = request.form.get("id", "")
    typed = request.form.get("confirm", "")
    if typed != user_id:
        return page(
            "message.html",
            400,
            title="Nothing deleted",
            message="The confirmation did not match the user id exactly, so nothing was deleted.",
            back=url_with("console.user", {"id": user_id}),
        )
    try:
        result = call("memory.deleteAll", {"userId": user_id})
    except ApiError as e:
        return page("message.html", e.status, title="Not deleted", message=e.message, back=None)
    return page(
        "message.html",
        title="Deleted",
        message=f"Deleted {result['deleted']} memories of {user_id}.",
        back=url_for("console.users"),
    )


# -- one memory ------------------------------------------------------------------------


def _memory_page(
    memory_id: str, *, status: int | None = None, error: dict[str, t.Any] | None = None
) -> Response:
    """A memory's page: it, and its history compared version by version (in the history's call);
    a fact's with its sources and what it replaced or was replaced by (:func:`_lineage`)."""
    found = call("memory.getById", {"id": memory_id})

    def render(history: list[dict[str, t.Any]]) -> Response:
        return page(
            "memory.html",
            status,
            memory=found,
            lineage=_lineage(found) if found.get("kind") == "fact" else None,
            versions=diff.versions(history),
            pretty=diff.pretty,
            error=error,
            saved=error is None and request.args.get("saved") == "1",
        )

    return call("memory.history", {"id": memory_id}, then=render)


def _lineage(fact: dict[str, t.Any]) -> dict[str, t.Any]:
    """A fact's source messages, the fact that replaced it and the facts it replaced, as the
    API shows memories: read for the tenant and user of the fact the key was just given (so
    within that key's call, and its tenant's), at most :data:`LINEAGE` of each."""
    sources, by, replaced = jobs.lineage(
        store(),
        fact["idpUserId"],
        fact["userId"],
        fact["id"],
        fact.get("sources", []),
        fact.get("supersededBy"),
        LINEAGE,
    )
    shown = outputs.MEMORY.dump
    return {
        "sources": [shown(m) for m in sources],
        "missing": len(fact.get("sources", [])[:LINEAGE]) - len(sources),
        "more_sources": max(0, len(fact.get("sources", [])) - LINEAGE),
        "by": shown(by) if by is not None else None,
        "replaced": [shown(m) for m in replaced],
        "more_replaced": len(replaced) == LINEAGE,
    }


@bp.get("/memory")
@needs(KEY)
def memory() -> Response:
    try:
        return _memory_page(request.args.get("id", ""))
    except ApiError as e:
        return page("message.html", e.status, title="No such memory", message=e.message, back=None)


@bp.post("/memory/update")
@needs(KEY)
def update() -> Response:
    memory_id = request.form.get("id", "")
    input: dict[str, t.Any] = {"id": memory_id, "content": request.form.get("content", "")}
    try:
        metadata_text = request.form.get("metadata", "").strip()
        input["metadata"] = json_field("metadata", metadata_text) if metadata_text else None
        expires = request.form.get("expiresAt", "").strip()
        # The field as it was shown: unchanged, the expiry is left alone.
        if expires[:19] != request.form.get("expiresWas", ""):
            input["expiresAt"] = iso_from_local(expires) if expires else None
        call("memory.update", input)
    except ApiError as e:
        try:
            return _memory_page(memory_id, status=e.status, error=failure(e))
        except ApiError as again:
            return page("message.html", again.status, title="Not saved", message=e.message)
    return redirect(url_with("console.memory", {"id": memory_id, "saved": "1"}))


@bp.post("/memory/delete")
@needs(KEY)
def delete() -> Response:
    memory_id = request.form.get("id", "")
    user_id = request.form.get("user", "")
    if request.form.get("confirm") != "yes":
        return page(
            "message.html",
            400,
            title="Nothing deleted",
            message="Tick the box to confirm the deletion.",
            back=url_with("console.memory", {"id": memory_id}),
        )
    try:
        call("memory.delete", {"id": memory_id})
    except ApiError as e:
        return page("message.html", e.status, title="Not deleted", message=e.message, back=None)
    return redirect(url_with("console.user", {"id": user_id}))
