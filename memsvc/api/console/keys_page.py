"""The console's keys page: the tenant's API keys, created (the secret shown once), limited
and revoked, with a token for key management."""

from __future__ import annotations

import typing as t

from flask import redirect
from flask import request
from flask import url_for
from werkzeug.wrappers import Response

from ...errors import ApiError
from .pages import TOKEN
from .pages import bp
from .pages import call
from .pages import failure
from .pages import needs
from .pages import page

#: The most digits a limit typed into the keys page is read as a number with.
_MOST_DIGITS = 18


def _keys_page(created: dict[str, t.Any] | None = None, error: ApiError | None = None) -> Response:
    """The keys page: the tenant's keys (listed in the call that renders them), a new key's
    secret once, or the error of what was asked (with its status)."""
    return call(
        "keys.list",
        then=lambda listed: page(
            "keys.html",
            keys=listed,
            created=created,
            error=failure(error) if error is not None else None,
        ),
    )


@bp.get("/keys")
@needs(TOKEN)
def keys_page() -> Response:
    return _keys_page()


@bp.post("/keys/create")
@needs(TOKEN)
def keys_create() -> Response:
    try:
        created = call("keys.create", {"name": request.form.get("name", "")})
    except ApiError as e:
        return _keys_page(error=e)
    # The secret is in this answer (no-store) and nowhere else: no redirect carries it.
    return _keys_page(created=created)


@bp.post("/keys/limits")
@needs(TOKEN)
def keys_limits() -> Response:
    # Empty: back to the server's setting; anything else goes to the API as
    # typed (a whole number, or the API's own 400 saying what it must be).
    given: dict[str, t.Any] = {"id": request.form.get("id", "")}
    for field in ("rateLimit", "concurrencyLimit"):
        text = request.form.get(field, "").strip()
        # Digits past any limit go as typed, for the API to refuse: Python
        # converts no more than 4,300 of them to an int.
        whole = text.isdecimal() and len(text) <= _MOST_DIGITS
        given[field] = None if not text else int(text) if whole else text
    try:
        call("keys.setLimits", given)
    except ApiError as e:
        return _keys_page(error=e)
    return redirect(url_for("console.keys_page"))


@bp.post("/keys/revoke")
@needs(TOKEN)
def keys_revoke() -> Response:
    if request.form.get("confirm") != "yes":
        return page(
            "message.html",
            400,
            title="Not revoked",
            message="Tick the box to confirm: a revoked key stops working at once, for good.",
            back=url_for("console.keys_page"),
        )
    try:
        call("keys.revoke", {"id": request.form.get("id", "")})
    except ApiError as e:
        return _keys_page(error=e)
    return redirect(url_for("console.keys_page"))
