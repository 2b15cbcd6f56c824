"""The console's session: who signed in, kept in one encrypted, authenticated cookie.

The cookie holds the API key (and the key-management token) the person
typed, so it is encrypted as well as signed (Fernet: AES and HMAC), never
readable by page scripts (HttpOnly), sent only to /console and only by
same-site requests (SameSite=Strict), and only over HTTPS when the console is
served over HTTPS (Secure). Every request re-checks the key (or token)
through the API's own middleware, so a revoked key or an expired token ends
the session at its next request, and a session left idle past
``CONSOLE_IDLE_SECONDS`` is gone. The one thing kept server-side is which
sessions were signed out (:func:`end`), so that a copy of a cookie taken
before its sign-out is refused by every worker and server after it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
import typing as t

from cryptography.fernet import Fernet
from cryptography.fernet import InvalidToken
from flask import Flask
from flask import current_app
from flask import request
from werkzeug.wrappers import Response

from ...errors import ConfigError
from ...store.signouts import SignOuts
from ..context import runtime

COOKIE = "memsvc_console"
#: The sign-in form's own session (its CSRF token only): a sign-in page opened
#: from another site, which cannot see COOKIE (SameSite=Strict), must not
#: replace the session of someone signed in.
SIGN_IN_COOKIE = "memsvc_console_sign_in"
PATH = "/console"


@dataclasses.dataclass
class Session:
    """A signed-in person: an API key (memories) and, for key management, a token."""

    #: Which session this is: a sign-out records it as ended (see :func:`end`).
    sid: str
    csrf: str
    seen: float
    api_key: str | None = None
    tenant: str | None = None
    token: str | None = None
    token_tenant: str | None = None

    @classmethod
    def new(cls) -> Session:
        return cls(sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32), seen=time.time())

    @property
    def signed_in(self) -> bool:
        return self.api_key is not None or self.token is not None


def _fernet(app: Flask) -> Fernet:
    cached = app.extensions.get("memsvc_console_fernet")
    if cached is None:
        cached = Fernet(_key(app))
        app.extensions["memsvc_console_fernet"] = cached
    return cached


def _key(app: Flask) -> bytes:
    configured = app.config["CONSOLE_SECRET_KEY"]
    if configured:
        import base64
        import hashlib

        return base64.urlsafe_b64encode(hashlib.sha256(configured.encode()).digest())
    # One key for every worker of the box: made once, by whichever worker
    # comes first (O_EXCL), and read by the others.
    path = os.path.join(app.instance_path, "console-secret")
    try:
        os.makedirs(app.instance_path, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key(path)
    except OSError as e:
        raise ConfigError(
            f"the console cannot keep its key in {app.instance_path} ({e.strerror}): "
            "set MEMSVC_CONSOLE_SECRET_KEY, or MEMSVC_CONSOLE=false"
        ) from None
    key = Fernet.generate_key()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _read_key(path: str) -> bytes:
    for _ in range(50):
        with open(path, "rb") as f:
            key = f.read().strip()
        if key:
            return key
        time.sleep(0.01)  # the other worker is still writing it
    raise ConfigError(f"{path} is empty: delete it, or set MEMSVC_CONSOLE_SECRET_KEY")


def load(name: str = COOKIE) -> Session | None:
    """This request's session, or None (none, tampered with, or idle too long)."""
    raw = request.cookies.get(name)
    if not raw:
        return None
    try:
        data = json.loads(_fernet(current_app).decrypt(raw.encode("ascii")))
        session = Session(**data)
    except (InvalidToken, ValueError, TypeError, UnicodeError):
        return None
    if time.time() - session.seen > current_app.config["CONSOLE_IDLE_SECONDS"]:
        return None
    if name == COOKIE and _signouts().ended(session.sid):
        return None  # a copy of a cookie from before its sign-out
    return session


def end(session: Session) -> None:
    """End ``session`` on every worker and server: a copy of its cookie is refused from now.

    Recorded until no cookie of it could be accepted any more: the newest
    one was issued at most now, and goes idle ``CONSOLE_IDLE_SECONDS`` after
    it (a minute more, for servers whose clocks differ a little).
    """
    until = time.time() + current_app.config["CONSOLE_IDLE_SECONDS"] + 60
    _signouts().end(session.sid, until)


def _signouts() -> SignOuts:
    return runtime().backend.signouts


def save(response: Response, session: Session, name: str = COOKIE) -> None:
    # A browser-session cookie: the idle timeout is the server's to enforce
    # (seen, inside the encrypted value), not the browser's.
    session.seen = time.time()
    value = _fernet(current_app).encrypt(json.dumps(dataclasses.asdict(session)).encode())
    response.set_cookie(
        name,
        value.decode("ascii"),
        path=PATH,
        secure=is_https(),
        httponly=True,
        samesite="Strict",
    )


def clear(response: Response, name: str = COOKIE) -> None:
    response.delete_cookie(name, path=PATH, secure=is_https(), httponly=True, samesite="Strict")


def is_https() -> bool:
    """Served over HTTPS, directly or by a proxy that says so."""
    forwarded = request.headers.get("X-Forwarded-Proto", "")
    return request.is_secure or forwarded.split(",")[0].strip().lower() == "https"


def check_csrf(session: Session | None, given: t.Any) -> bool:
    return (
        session is not None
        and isinstance(given, str)
        and secrets.compare_digest(given.encode(), session.csrf.encode())
    )


def seal(response: Response, name: str, data: dict[str, t.Any]) -> None:
    """Keep ``data`` encrypted in cookie ``name`` for ten minutes, sent on cross-site top-level
    navigations too (SameSite=Lax): the identity provider's redirect back is one."""
    value = _fernet(current_app).encrypt(json.dumps(data).encode()).decode("ascii")
    response.set_cookie(
        name, value, max_age=600, path=PATH, secure=is_https(), httponly=True, samesite="Lax"
    )


def unseal(name: str) -> dict[str, t.Any] | None:
    raw = request.cookies.get(name)
    if not raw:
        return None
    try:
        data = json.loads(_fernet(current_app).decrypt(raw.encode("ascii"), ttl=600))
    except (InvalidToken, ValueError, UnicodeError):
        return None
    return data if isinstance(data, dict) else None


def forget(response: Response, name: str) -> None:
    response.delete_cookie(name, path=PATH, secure=is_https(), httponly=True, samesite="Lax")
