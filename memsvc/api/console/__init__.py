"""The web console at ``/console``: what memsvc knows about each end user, and why a search
found what it found.

Server-rendered pages (Jinja2, autoescaped), a stylesheet and one small
script, all served from here: no CDN, no build step, works offline. Every
page gets its data through :func:`.invoke.invoke`, i.e. the API's own
procedures with their checks and limits. Pages are hardened against the data
they show (user ids, memories, metadata and key names are untrusted): a
strict Content-Security-Policy without inline script or style, no framing, a
CSRF token on every state-changing form, and no secret in any URL.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import math
import typing as t
import urllib.parse

from flask import Blueprint
from flask import Flask
from flask import abort
from flask import current_app
from flask import g
from flask import make_response
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from ... import clock
from ...errors import ApiError
from ...errors import BadRequest
from ...errors import Unauthorized
from ...limits import EPHEMERAL
from ...limits import Limits
from ...limits import Refused
from ..context import runtime
from ..trpc import parse_json
from . import diff
from . import oidc
from . import session as sessions
from .invoke import invoke

log = logging.getLogger(__name__)

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

PAGE_SIZE = 25
#: The most digits a limit typed into the keys page is read as a number with.
_MOST_DIGITS = 18
USERS_PAGE = 50
MODES = ("hybrid", "semantic", "keyword")


def init_app(app: Flask) -> None:
    if app.config["CONSOLE"]:
        # Made now, not at the first sign-in: a bad instance folder fails the start.
        sessions._fernet(app)
        app.register_blueprint(bp)


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


# -- sessions --------------------------------------------------------------------------


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


def _session() -> sessions.Session | None:
    if "console_session" not in g:
        g.console_session = sessions.load()
    return g.console_session


def _same_origin() -> bool:
    """The browser says the form was sent from a page of this host (or says nothing).

    The host alone is compared: behind a TLS-terminating proxy the scheme
    memsvc sees is not the browser's. ``Origin: null`` (a sandboxed or opaque
    origin) is refused.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return urllib.parse.urlsplit(origin).netloc == request.host


def _state_changing() -> None:
    """A POST must come from a console page: same origin, with the session's CSRF token."""
    if not _same_origin():
        abort(403, "Cross-site request refused")
    if not sessions.check_csrf(_session(), request.form.get("csrf")):
        abort(403, "This form has expired or did not come from the console: reload the page")


def needs_key(view: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
    @functools.wraps(view)
    def wrapped(*args: t.Any, **kwargs: t.Any) -> t.Any:
        s = _session()
        if s is None or s.api_key is None:
            if s is None and request.cookies.get(sessions.COOKIE):
                raise SignedOut("idle")
            return redirect(url_for("console.sign_in"))
        if request.method == "POST":
            _state_changing()
        return view(*args, **kwargs)

    return wrapped


def needs_token(view: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
    @functools.wraps(view)
    def wrapped(*args: t.Any, **kwargs: t.Any) -> t.Any:
        s = _session()
        if s is None or s.token is None:
            if s is None and request.cookies.get(sessions.COOKIE):
                raise SignedOut("idle")
            return redirect(url_for("console.sign_in", what="token"))
        if request.method == "POST":
            _state_changing()
        return view(*args, **kwargs)

    return wrapped


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
    s = _session()
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
    s = _session()
    if status is None:
        error = context.get("error")
        status = error["status"] if isinstance(error, dict) else 200
    response = make_response(
        render_template(
            f"console/{template}",
            session=s,
            csrf=s.csrf if s else "",
            **context,
        ),
        status,
    )
    return response


def failure(e: ApiError) -> dict[str, t.Any]:
    return {"code": e.code, "message": e.message, "status": e.status}


# -- sign in and out ------------------------------------------------------------------

_WHY = {
    "key": "The API key was refused (revoked?): sign in again.",
    "token": "The token was refused (expired?): sign in again to manage keys.",
    "idle": "The session ended after a while without use: sign in again.",
    "out": "Signed out.",
    "out-here": "Signed out in this browser. The server could not record the sign-out (its "
    "storage is failing): a copy of this session's cookie is refused only once it has been "
    "idle for the console's idle time.",
}


@bp.get("", strict_slashes=False)
def bare() -> Response:
    """``/console``: on to ``/console/`` by a relative redirect, whatever the Host header says."""
    return redirect(url_for("console.home"))


@bp.get("/")
def home() -> Response:
    s = _session()
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
    if not _same_origin():
        abort(403, "Cross-site request refused")
    what = "token" if request.form.get("what") == "token" else "key"
    form = sessions.load(sessions.SIGN_IN_COOKIE)
    if not sessions.check_csrf(form, request.form.get("csrf")):
        g.console_sign_in = sessions.Session.new()
        message = "The sign-in form had expired: type the secret again."
        return sign_in_page(403, what=what, error=message)
    secret = (request.form.get("secret") or "").strip()
    if not _attempt_allowed():
        message = "Too many sign-in attempts from this address: wait a minute."
        return sign_in_page(429, what=what, error=message)
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
    before = _session()
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


def _end(session: sessions.Session) -> bool:
    """End ``session`` everywhere (:func:`.session.end`); False if that could not be recorded."""
    try:
        sessions.end(session)
    except Exception as e:
        log.warning("a console sign-out was not recorded: %s: %s", type(e).__name__, e)
        return False
    return True


def _callback_url() -> str:
    """Where the identity provider sends the browser back: under ``MEMSVC_PUBLIC_URL`` when set
    (else as the request reached memsvc, Host header included)."""
    public = current_app.config["PUBLIC_URL"]
    if public:
        path = url_for("console.oidc_callback").removeprefix(request.script_root)
        return public.rstrip("/") + path
    return url_for(
        "console.oidc_callback", _external=True, _scheme="https" if sessions.is_https() else "http"
    )


@bp.get("/sign-in/oidc")
def oidc_start() -> Response:
    if not oidc.enabled(current_app):
        abort(404)
    if not _attempt_allowed():
        message = "Too many sign-in attempts from this address: wait a minute."
        return sign_in_page(429, what="token", error=message)
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
    except oidc.Failed as e:
        response = sign_in_page(400, what="token", error=f"Sign-in failed: {e}")
        sessions.forget(response, oidc.COOKIE)
        return response
    except ApiError as e:
        response = sign_in_page(
            e.status, what="token", error=f"That token was refused ({e.message})"
        )
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


@bp.post("/sign-out")
def sign_out() -> Response:
    if not _same_origin():
        abort(403, "Cross-site request refused")
    s = _session()
    if s is not None and not sessions.check_csrf(s, request.form.get("csrf")):
        abort(403, "This form has expired: reload the page")
    g.console_signed_out = True
    g.console_session = None
    recorded = s is None or _end(s)
    return redirect(url_for("console.sign_in", why="out" if recorded else "out-here"))


# -- end users -------------------------------------------------------------------------


@bp.get("/users")
@needs_key
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


def _iso_from_local(value: str | None) -> str | None:
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


@bp.get("/user")
@needs_key
def user() -> Response:
    user_id = request.args.get("id", "")
    after = request.args.get("after") or None
    filter_text = request.args.get("filter", "").strip()
    created_from = request.args.get("from", "")
    created_to = request.args.get("to", "")
    query = {"id": user_id, "filter": filter_text, "from": created_from, "to": created_to}

    def render(
        memories: list[dict[str, t.Any]],
        summary: dict[str, t.Any] | None,
        error: dict[str, t.Any] | None = None,
    ) -> Response:
        more = len(memories) > PAGE_SIZE
        memories = memories[:PAGE_SIZE]
        return page(
            "user.html",
            user_id=user_id,
            summary=summary,
            memories=memories,
            error=error,
            filter_text=filter_text,
            created_from=created_from,
            created_to=created_to,
            first_url=_url("console.user", query),
            next_url=_url("console.user", {**query, "after": memories[-1]["id"]}) if more else None,
            paged=bool(after),
            pretty=diff.pretty,
            now=clock.iso(clock.now_ms()),
        )

    input: dict[str, t.Any] = {"userId": user_id, "limit": PAGE_SIZE + 1}
    if after:
        input["cursor"] = after
    try:
        if filter_text:
            input["filter"] = _json("filter", filter_text)
        if created_from:
            input["createdAfter"] = _iso_from_local(created_from)
        if created_to:
            input["createdBefore"] = _iso_from_local(created_to)
        memories = call("memory.getAll", input)

        def summarised(found: list[dict[str, t.Any]]) -> Response:
            summary = found[0] if found and found[0]["userId"] == user_id else None
            return render(memories, summary)

        return call("memory.users", {"prefix": user_id, "limit": 1}, then=summarised)
    except ApiError as e:
        return render([], None, failure(e))


def _json(field: str, text: str) -> t.Any:
    """A JSON field of a form, read as the API reads JSON (no NaN, nesting within reason)."""
    try:
        return parse_json(text)
    except BadRequest as e:
        raise BadRequest(f"{field}: {e.message}") from None


def _url(endpoint: str, args: dict[str, t.Any]) -> str:
    kept = {k: v for k, v in args.items() if v not in (None, "")}
    return url_for(endpoint) + ("?" + urllib.parse.urlencode(kept) if kept else "")


@bp.post("/user/delete-all")
@needs_key
def delete_all() -> Response:
    user_id = request.form.get("id", "")
    typed = request.form.get("confirm", "")
    if typed != user_id:
        return page(
            "message.html",
            400,
            title="Nothing deleted",
            message="The confirmation did not match the user id exactly, so nothing was deleted.",
            back=_url("console.user", {"id": user_id}),
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
    """A memory's page: it, and its history compared version by version (in the history's call)."""
    found = call("memory.getById", {"id": memory_id})
    return call(
        "memory.history",
        {"id": memory_id},
        then=lambda history: page(
            "memory.html",
            status,
            memory=found,
            versions=diff.versions(history),
            pretty=diff.pretty,
            error=error,
            saved=error is None and request.args.get("saved") == "1",
        ),
    )


@bp.get("/memory")
@needs_key
def memory() -> Response:
    try:
        return _memory_page(request.args.get("id", ""))
    except ApiError as e:
        return page("message.html", e.status, title="No such memory", message=e.message, back=None)


@bp.post("/memory/update")
@needs_key
def update() -> Response:
    memory_id = request.form.get("id", "")
    input: dict[str, t.Any] = {"id": memory_id, "content": request.form.get("content", "")}
    try:
        metadata_text = request.form.get("metadata", "").strip()
        input["metadata"] = _json("metadata", metadata_text) if metadata_text else None
        expires = request.form.get("expiresAt", "").strip()
        # The field as it was shown: unchanged, the expiry is left alone.
        if expires[:19] != request.form.get("expiresWas", ""):
            input["expiresAt"] = _iso_from_local(expires) if expires else None
        call("memory.update", input)
    except ApiError as e:
        try:
            return _memory_page(memory_id, status=e.status, error=failure(e))
        except ApiError as again:
            return page("message.html", again.status, title="Not saved", message=e.message)
    return redirect(_url("console.memory", {"id": memory_id, "saved": "1"}))


@bp.post("/memory/delete")
@needs_key
def delete() -> Response:
    memory_id = request.form.get("id", "")
    user_id = request.form.get("user", "")
    if request.form.get("confirm") != "yes":
        return page(
            "message.html",
            400,
            title="Nothing deleted",
            message="Tick the box to confirm the deletion.",
            back=_url("console.memory", {"id": memory_id}),
        )
    try:
        call("memory.delete", {"id": memory_id})
    except ApiError as e:
        return page("message.html", e.status, title="Not deleted", message=e.message, back=None)
    return redirect(_url("console.user", {"id": user_id}))


# -- search ----------------------------------------------------------------------------


def _number(field: str, default: float, low: float, high: float) -> float:
    """A number of the search form, moved into ``low``..``high``; absent: ``default``.

    :raises BadRequest: it is no number (NaN and infinities are none either).
    """
    text = request.args.get(field)
    if text in (None, ""):
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadRequest(f"{field} must be a number from {low:g} to {high:g}")
    return min(max(value, low), high)


@bp.get("/search")
@needs_key
def search() -> Response:
    info = call("service.info")
    recommended = info["embedder"]["recommendedThreshold"]
    default_threshold = recommended if recommended is not None else info["defaults"]["threshold"]
    user_id = request.args.get("user", "")
    query = request.args.get("q", "")
    mode = request.args.get("mode", "hybrid")
    mode = mode if mode in MODES else "hybrid"
    error = None
    try:
        limit = int(_number("limit", 10, 1, 100))
        threshold = round(_number("threshold", default_threshold, 0, 1), 2)
    except BadRequest as e:
        limit, threshold = 10, round(default_threshold, 2)
        error = failure(e)

    def render(
        results: list[dict[str, t.Any]],
        below: list[dict[str, t.Any]],
        error: dict[str, t.Any] | None = error,
    ) -> Response:
        return page(
            "search.html",
            user_id=user_id,
            query=query,
            mode=mode,
            modes=MODES,
            limit=limit,
            threshold=threshold,
            recommended=recommended,
            results=results,
            below=below,
            chart=_chart(results + below, threshold, recommended),
            error=error,
        )

    if not (user_id and query) or error is not None:
        return render([], [])  # the form alone
    base = {"userId": user_id, "query": query, "mode": mode, "explain": True}
    asked = {**base, "limit": limit, "threshold": threshold}
    try:
        if threshold <= 0:
            return call("memory.search", asked, then=lambda results: render(results, []))
        results = call("memory.search", asked)
        shown = {r["id"] for r in results}

        def with_near(near: list[dict[str, t.Any]]) -> Response:
            # What a slightly lower threshold would add: shown greyed, below the line.
            below = [r for r in near if r["id"] not in shown and r["similarity"] < threshold]
            return render(results, below[:5])

        lower = {**base, "limit": limit + 5, "threshold": max(0.0, threshold - 0.15)}
        return call("memory.search", lower, then=with_near)
    except ApiError as e:
        return render([], [], failure(e))


def _chart(
    results: list[dict[str, t.Any]], threshold: float, recommended: float | None
) -> dict[str, t.Any]:
    """A histogram of the results' similarities in ten bins, drawn as SVG by the template."""
    bins = [0] * 10
    for r in results:
        bins[min(int(r["similarity"] * 10), 9)] += 1
    top = max(bins) or 1
    height = 60
    bars = [
        {
            "x": i * 30,
            "h": round(height * n / top),
            "y": height - round(height * n / top),
            "n": n,
            "label": f"{i / 10:.1f}–{(i + 1) / 10:.1f}",
            "below": (i + 1) / 10 <= threshold,
        }
        for i, n in enumerate(bins)
    ]
    return {
        "bars": bars,
        "height": height,
        "threshold_x": round(threshold * 300),
        "recommended_x": None if recommended is None else round(recommended * 300),
    }


# -- keys ------------------------------------------------------------------------------


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
@needs_token
def keys_page() -> Response:
    return _keys_page()


@bp.post("/keys/create")
@needs_token
def keys_create() -> Response:
    try:
        created = call("keys.create", {"name": request.form.get("name", "")})
    except ApiError as e:
        return _keys_page(error=e)
    # The secret is in this answer (no-store) and nowhere else: no redirect carries it.
    return _keys_page(created=created)


@bp.post("/keys/limits")
@needs_token
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
@needs_token
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


# -- the service -----------------------------------------------------------------------


@bp.get("/service")
@needs_key
def service() -> Response:
    from ..health import health

    info = call("service.info")
    answer = health()
    status = answer.get_json()
    return call(
        "memory.users",
        {"limit": 1000},
        then=lambda counted: page(
            "service.html",
            info=info,
            health=status,
            healthy=answer.status_code == 200,
            users=len(counted),
            memories=sum(u["memories"] for u in counted),
            more=len(counted) == 1000,
        ),
    )
