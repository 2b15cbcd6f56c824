"""Signing in to key management at the identity provider: authorization code with PKCE.

Where ``MEMSVC_OIDC_ISSUER`` and ``MEMSVC_CONSOLE_OIDC_CLIENT_ID`` are set,
"Sign in with your identity provider" sends the browser to the provider's
authorization endpoint (from its discovery document) with a fresh ``state``,
``nonce`` and S256 code challenge, all three kept in an encrypted cookie of
their own. The provider sends the browser back to ``/callback`` with a code,
which is exchanged (with the code verifier) for an access token; that token
is then checked exactly as the ``keys`` router checks a bearer token.

The way back is a top-level navigation from another site, which the
session cookie (SameSite=Strict) does not ride on: the callback keeps the
token in its own Lax cookie and hands over to ``/done`` through a same-site
page, where the session is at hand again.
"""

from __future__ import annotations

import typing as t

from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session
from flask import Flask
from flask import current_app

from ...tokens import DiscoveryFailed
from ...tokens import discover

#: The cookie holding state, nonce and code verifier between the two legs.
COOKIE = "memsvc_console_oidc"


#: The error codes of an authorization response (RFC 6749 4.1.2.1, OpenID Connect Core
#: 3.1.2.6): the only text of the provider's redirect the console repeats.
_ERROR_CODES = frozenset(
    [
        "invalid_request", "unauthorized_client", "access_denied", "unsupported_response_type",
        "invalid_scope", "server_error", "temporarily_unavailable", "interaction_required",
        "login_required", "account_selection_required", "consent_required",
        "invalid_request_uri", "invalid_request_object", "request_not_supported",
        "request_uri_not_supported", "registration_not_supported",
    ]
)  # fmt: skip


class Failed(Exception):
    """The provider could not be used, or its answer not accepted (the message says why)."""


def enabled(app: Flask) -> bool:
    return bool(app.config["OIDC_ISSUER"] and app.config["CONSOLE_OIDC_CLIENT_ID"])


def _endpoints() -> dict[str, str]:
    """The provider's authorization and token endpoints, discovered (and checked) once."""
    cached = current_app.extensions.get("memsvc_console_oidc")
    if cached is not None:
        return t.cast(dict[str, str], cached)
    try:
        found = discover(
            current_app.config["OIDC_ISSUER"], ("authorization_endpoint", "token_endpoint")
        )
    except DiscoveryFailed as e:
        raise Failed(f"the identity provider's discovery document is unusable ({e})") from None
    endpoints = {"authorize": found["authorization_endpoint"], "token": found["token_endpoint"]}
    current_app.extensions["memsvc_console_oidc"] = endpoints
    return endpoints


def _client(redirect_uri: str) -> OAuth2Session:
    config = current_app.config
    return OAuth2Session(
        config["CONSOLE_OIDC_CLIENT_ID"],
        config["CONSOLE_OIDC_CLIENT_SECRET"],
        scope=config["CONSOLE_OIDC_SCOPE"],
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        token_endpoint_auth_method=(
            "client_secret_basic" if config["CONSOLE_OIDC_CLIENT_SECRET"] else "none"
        ),
    )


def start(redirect_uri: str) -> tuple[str, dict[str, str]]:
    """The provider's authorization URL, and what the callback must find again."""
    verifier = generate_token(64)
    nonce = generate_token(32)
    extra = {"nonce": nonce}
    audience = current_app.config["JWT_AUDIENCE"]
    if audience:
        # Providers that issue JWT access tokens per API (Auth0) need the API named.
        extra["audience"] = audience
    with _client(redirect_uri) as client:
        url, state = client.create_authorization_url(
            _endpoints()["authorize"], code_verifier=verifier, **extra
        )
    return url, {"state": state, "verifier": verifier, "nonce": nonce}


def finish(redirect_uri: str, pending: dict[str, str], args: t.Mapping[str, str]) -> str:
    """The access token for the provider's answer ``args``, once it is the one expected."""
    if "error" in args:
        # Its text is the sender's, whoever that is: never shown, beyond a code OAuth defines.
        code = args.get("error")
        named = f" ({code})" if code in _ERROR_CODES else ""
        raise Failed(f"the identity provider refused the sign-in{named}")
    if not pending.get("state") or args.get("state") != pending["state"]:
        raise Failed("the sign-in came back with a state this browser did not start")
    code = args.get("code")
    if not code:
        raise Failed("the identity provider sent no code")
    try:
        with _client(redirect_uri) as client:
            token = client.fetch_token(
                _endpoints()["token"],
                grant_type="authorization_code",
                code=code,
                code_verifier=pending["verifier"],
                timeout=10,
            )
    except Failed:
        raise
    except Exception as e:  # authlib's OAuthError, requests' errors: the provider said no
        raise Failed(f"the code could not be exchanged for a token ({type(e).__name__})") from None
    access = token.get("access_token")
    if not isinstance(access, str) or not access:
        raise Failed("the identity provider sent no access token")
    return access
