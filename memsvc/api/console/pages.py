"""What every console page is made with: the blueprint, the session and the credential a page
needs, its API calls, and how it is answered.

A page runs the API's procedures with the session's credential
(:func:`call`) and renders its template inside its last call
(:func:`page`), so within that call's concurrency slot. Every answer is
hardened (:func:`_harden`): a strict Content-Security-Policy without inline
script or style, no framing, no caching of pages; every form that changes
something must come from a console page of this host with the session's
CSRF token (:func:`needs`).
"""

from __future__ import annotations

import datetime
import functools
import typing as t
import urllib.parse

from flask import Blueprint
from flask import abort
from flask import g
from flask import make_response
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from ...errors import ApiError
from ...errors import BadRequest
from ...errors import Unauthorized
from ..trpc import parse_json
from . import session as sessions
from .invoke import invoke

bp = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)

#: No inline script or style anywhere: a memory that smuggles markup in stays text.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; connect-src 'self'"
)

_EXPIRED = "This form has expired or did not come from the console: reload the page"

#: What a page needs signed in: an API key (memories), or a token (key management).
KEY = "key"
TOKEN = "token"


@bp.after_request
def _harden(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    if not request.path.startswith("/console/static/"):
        response.headers["Cache-Control"] = "no-store"
    session = g.get("console_session")
    if g.get("console_signed_out"):
        sessions.clear(response)
    elif session is not None:
        sessions.save(response, session)
    pre = g.get("console_sign_in")
    if pre is not None:
        sessions.save(response, pre, sessions.SIGN_IN_COOKIE)
    elif g.get("console_sign_in_done"):
        sessions.clear(response, sessions.SIGN_IN_COOKIE)
    return response


class SignedOut(Exception):
    """The session ended (revoked key, expired token, idle): sign in again.

    ``keep``: only the token went (an API key is still signed in).
    """

    def __init__(self, reason: str, *, keep: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.keep = keep


@bp.errorhandler(ApiError)
def _refused(e: ApiError) -> Response:
    return page("message.html", e.status, title="Refused", message=e.message, back=None)


@bp.errorhandler(HTTPException)
def _http(e: HTTPException) -> Response:
    return page("message.html", e.code or 500, title=e.name, message=e.description or "", back=None)


@bp.errorhandler(SignedOut)
def _signed_out(e: SignedOut) -> Response:
    if not e.keep:
        g.console_signed_out = True
        g.console_session = None
    return redirect(url_for("console.sign_in", why=e.reason, what="token" if e.keep else None))


def session() -> sessions.Session | None:
    """This request's session, read once."""
    if "console_session" not in g:
        g.console_session = sessions.load()
    return t.cast("sessions.Session | None", g.console_session)


def same_origin() -> bool:
    """The browser says the form was sent from a page of this host (or says nothing).

    The host alone is compared: behind a TLS-terminating proxy the scheme
    memsvc sees is not the browser's. ``Origin: null`` (a sandboxed or opaque
    origin) is refused.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return urllib.parse.urlsplit(origin).netloc == request.host


def needs(credential: str) -> t.Callable[[t.Callable[..., t.Any]], t.Callable[..., t.Any]]:
    """A page for a session with an API key (:data:`KEY`) or a token (:data:`TOKEN`).

    Without one: to the sign-in page (saying why, if a session just ended).
    A POST must also come from a console page: same origin, with the
    session's CSRF token.
    """

    def decorate(view: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
        @functools.wraps(view)
        def wrapped(*args: t.Any, **kwargs: t.Any) -> t.Any:
            s = session()
            if s is None or (s.api_key if credential == KEY else s.token) is None:
                if s is None and request.cookies.get(sessions.COOKIE):
                    raise SignedOut("idle")
                what = "token" if credential == TOKEN else None
                return redirect(url_for("console.sign_in", what=what))
            if request.method == "POST":
                if not same_origin():
                    abort(403, "Cross-site request refused")
                if not sessions.check_csrf(s, request.form.get("csrf")):
                    abort(403, _EXPIRED)
            return view(*args, **kwargs)

        return wrapped

    return decorate


def call(
    path: str,
    input: dict[str, t.Any] | None = None,
    then: t.Callable[[t.Any], t.Any] | None = None,
) -> t.Any:
    """Run an API procedure with the session's credential; a refused credential ends it.

    Its answer, or with ``then`` what ``then`` makes of it (the page): made
    inside the call, so within its concurrency slot. A page is rendered in
    its last call: a key allowed one call at a time renders one page at a time.
    """
    s = session()
    assert s is not None
    uses_token = path.startswith("keys.")
    try:
        data, _ = invoke(
            path,
            input or {},
            api_key=None if uses_token else s.api_key,
            token=s.token if uses_token else None,
            then=then,
        )
    except Unauthorized as e:
        if uses_token:
            s.token = s.token_tenant = None
            raise SignedOut("token", keep=s.api_key is not None) from e
        raise SignedOut("key") from e
    return data


def page(template: str, status: int | None = None, **context: t.Any) -> Response:
    """A page answered with ``status``; by default 200, or the status of the error it shows."""
    s = session()
    if status is None:
        error = context.get("error")
        status = error["status"] if isinstance(error, dict) else 200
    return make_response(
        render_template(f"console/{template}", session=s, csrf=s.csrf if s else "", **context),
        status,
    )


def failure(e: ApiError) -> dict[str, t.Any]:
    """An error as a page shows it."""
    return {"code": e.code, "message": e.message, "status": e.status}


def json_field(field: str, text: str) -> t.Any:
    """A JSON field of a form, read as the API reads JSON (no NaN, nesting within reason)."""
    try:
        return parse_json(text)
    except BadRequest as e:
        raise BadRequest(f"{field}: {e.message}") from None


def iso_from_local(value: str | None) -> str | None:
    """A ``datetime-local`` field's value, read as UTC, as the API's timestamp."""
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return value  # the API names the field and the rule
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.isoformat()


def position(field: str, text: str | None) -> int | None:
    """A form's message position (0 or more); absent: ``None``.

    :raises BadRequest: it is not one (the API's limit is the database's, so
        a number of thousands of digits is refused here, not there).
    """
    if text in (None, ""):
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 15):
        raise BadRequest(f"{field} must be a message position: a whole number, 0 or more")
    return int(text)


def url_with(endpoint: str, args: dict[str, t.Any]) -> str:
    """A page's URL with the arguments that have a value."""
    kept = {k: v for k, v in args.items() if v not in (None, "")}
    return url_for(endpoint) + ("?" + urllib.parse.urlencode(kept) if kept else "")
