"""Signing in and out of the console: with an API key or a token, or at the identity provider.

Each sign-in checks its secret through the API (``service.info`` for a
key, ``keys.list`` for a token) and starts a new session, ending the one it
replaces (:func:`_start_session`); attempts are limited per client address.
A sign-out ends the session on every worker and server
(:func:`.session.end`). OpenID Connect sign-in is :mod:`.oidc`'s, in two
legs around the provider, handed over by a cookie of its own.
"""

from __future__ import annotations

import hashlib
import logging

from flask import abort
from flask import current_app
from flask import g
from flask import redirect
from flask import request
from flask import url_for
from werkzeug.wrappers import Response

from ...errors import ApiError
from ...limits import EPHEMERAL
from ...limits import Limits
from ...limits import Refused
from ..context import runtime
from . import oidc
from . import session as sessions
from .invoke import invoke
from .pages import bp
from .pages import page
from .pages import same_origin
from .pages import session

log = logging.getLogger(__name__)

_WHY = {
    "key": "The API key was refused (revoked?): sign in again.",
    "token": "The token was refused (expired?): sign in again to manage keys.",
    "idle": "The session ended after a while without use: sign in again.",
    "out": "Signed out.",
    "out-here": "Signed out in this browser. The server could not record the sign-out (its "
    "storage is failing): a copy of this session's cookie is refused only once it has been "
    "idle for the console's idle time.",
}
_TOO_MANY = "Too many sign-in attempts from this address: wait a minute."


@bp.get("", strict_slashes=False)
def bare() -> Response:
    """``/console``: on to ``/console/`` by a relative redirect, whatever the Host header says."""
    return redirect(url_for("console.home"))


@bp.get("/")
def home() -> Response:
    s = session()
    if s is not None and s.api_key is not None:
        return redirect(url_for("console.users"))
    if s is not None and s.token is not None:
        return redirect(url_for("console.keys_page"))
    return redirect(url_for("console.sign_in"))


def _sign_in_form() -> sessions.Session:
    """The sign-in form's session (made now if there is none), kept by this response."""
    pre = g.get("console_sign_in") or sessions.load(sessions.SIGN_IN_COOKIE)
    if pre is None:
        pre = sessions.Session.new()
    g.console_sign_in = pre
    return pre


def sign_in_page(
    status: int = 200, *, what: str, error: str | None, why: str | None = None
) -> Response:
    form = _sign_in_form()
    return page(
        "sign_in.html",
        status,
        why=why,
        what=what,
        error=error,
        form_csrf=form.csrf,
        oidc=oidc.enabled(current_app),
    )


@bp.get("/sign-in")
def sign_in() -> Response:
    why = _WHY.get(request.args.get("why", ""))
    return sign_in_page(what=request.args.get("what", "key"), error=None, why=why)


def _attempt_allowed() -> bool:
    """Sign-in attempts per client address, counted by the API's limiter across workers."""
    address = request.remote_addr or "unknown"
    # One key per address, forgotten once idle (by every kind of limiter).
    key = EPHEMERAL + "console-sign-in-" + hashlib.sha256(address.encode()).hexdigest()[:32]
    try:
        runtime().limiter.acquire(key, Limits(current_app.config["CONSOLE_SIGNIN_PER_MINUTE"], 0))
    except Refused:
        return False
    return True


@bp.post("/sign-in")
def sign_in_post() -> Response:
    if not same_origin():
        abort(403, "Cross-site request refused")
    what = "token" if request.form.get("what") == "token" else "key"
    form = sessions.load(sessions.SIGN_IN_COOKIE)
    if not sessions.check_csrf(form, request.form.get("csrf")):
        g.console_sign_in = sessions.Session.new()
        message = "The sign-in form had expired: type the secret again."
        return sign_in_page(403, what=what, error=message)
    secret = (request.form.get("secret") or "").strip()
    if not _attempt_allowed():
        return sign_in_page(429, what=what, error=_TOO_MANY)
    if not secret:
        return sign_in_page(400, what=what, error="Type the secret first.")
    try:
        if what == "key":
            _, used = invoke("service.info", {}, api_key=secret)
        else:
            _, used = invoke("keys.list", {}, token=secret)
    except ApiError as e:
        refused = "That API key was refused." if what == "key" else "That token was refused."
        return sign_in_page(e.status, what=what, error=f"{refused} ({e.message})")
    _start_session(what, secret, used.caller.tenant)
    g.console_sign_in_done = True
    return redirect(url_for("console.users" if what == "key" else "console.keys_page"))


def _start_session(what: str, secret: str, tenant: str) -> None:
    """A new session (new id, new CSRF token) for ``secret``, ending the one it replaces.

    Never the browser's session with the secret added: a session cookie
    planted in the browser beforehand (someone else's) would be joined, and
    its key or token used unseen. Only the other kind of credential of a
    session this browser already holds is kept, and only when it names the
    same tenant (an API key beside a token for its keys).
    """
    before = session()
    s = sessions.Session.new()
    if what == "key":
        s.api_key, s.tenant = secret, tenant
        if before is not None and before.token is not None and before.token_tenant == tenant:
            s.token, s.token_tenant = before.token, before.token_tenant
    else:
        s.token, s.token_tenant = secret, tenant
        if before is not None and before.api_key is not None and before.tenant == tenant:
            s.api_key, s.tenant = before.api_key, before.tenant
    if before is not None:
        _end(before)
    g.console_session = s


def _end(ended: sessions.Session) -> bool:
    """End a session everywhere (:func:`.session.end`); False if that could not be recorded."""
    try:
        sessions.end(ended)
    except Exception as e:
        log.warning("a console sign-out was not recorded: %s: %s", type(e).__name__, e)
        return False
    return True


@bp.post("/sign-out")
def sign_out() -> Response:
    if not same_origin():
        abort(403, "Cross-site request refused")
    s = session()
    if s is not None and not sessions.check_csrf(s, request.form.get("csrf")):
        abort(403, "This form has expired: reload the page")
    g.console_signed_out = True
    g.console_session = None
    recorded = s is None or _end(s)
    return redirect(url_for("console.sign_in", why="out" if recorded else "out-here"))


# -- at the identity provider ----------------------------------------------------------


def _callback_url() -> str:
    """Where the identity provider sends the browser back: under ``MEMSVC_PUBLIC_URL`` when set
    (else as the request reached memsvc, Host header included)."""
    public = current_app.config["PUBLIC_URL"]
    if public:
        path = url_for("console.oidc_callback").removeprefix(request.script_root)
        return str(public).rstrip("/") + path
    return url_for(
        "console.oidc_callback", _external=True, _scheme="https" if sessions.is_https() else "http"
    )


@bp.get("/sign-in/oidc")
def oidc_start() -> Response:
    if not oidc.enabled(current_app):
        abort(404)
    if not _attempt_allowed():
        return sign_in_page(429, what="token", error=_TOO_MANY)
    try:
        url, pending = oidc.start(_callback_url())
    except oidc.Failed as e:
        return sign_in_page(502, what="token", error=f"Sign-in failed: {e}")
    response = redirect(url)
    sessions.seal(response, oidc.COOKIE, pending)
    return response


@bp.get("/sign-in/oidc/callback")
def oidc_callback() -> Response:
    if not oidc.enabled(current_app):
        abort(404)
    pending = sessions.unseal(oidc.COOKIE) or {}
    try:
        token = oidc.finish(_callback_url(), pending, request.args)
        _, used = invoke("keys.list", {}, token=token)
    except (oidc.Failed, ApiError) as e:
        if isinstance(e, ApiError):
            status, error = e.status, f"That token was refused ({e.message})"
        else:
            status, error = 400, f"Sign-in failed: {e}"
        response = sign_in_page(status, what="token", error=error)
        sessions.forget(response, oidc.COOKIE)
        return response
    # Back on this site by a same-site navigation, where the session cookie is sent.
    response = page("oidc_done.html")
    sessions.seal(response, oidc.COOKIE, {"token": token, "tenant": used.caller.tenant})
    return response


@bp.get("/sign-in/oidc/done")
def oidc_done() -> Response:
    signed = sessions.unseal(oidc.COOKIE) or {}
    if not signed.get("token"):
        return redirect(url_for("console.sign_in", what="token"))
    _start_session("token", signed["token"], signed["tenant"])
    response = redirect(url_for("console.keys_page"))
    sessions.forget(response, oidc.COOKIE)
    return response
