"""Signing in to the console's key management at an OIDC provider (its endpoints faked with
responses): authorization code with PKCE, state checked, the token checked as the API does."""

import base64
import hashlib
import json
import re
import time
import urllib.parse

import pytest
import responses
from joserfc import jwt
from joserfc.jwk import KeySet
from joserfc.jwk import RSAKey

from memsvc.api.context import store
from memsvc.services import keys
from tests.http.test_console_http import sign_in

ISSUER = "https://login.example.test/"
AUDIENCE = "https://memsvc.example.test"


@pytest.fixture
def provider(make_app, request):
    """The provider, and a client of memsvc using it (with the settings given as ``param``)."""
    settings = getattr(request, "param", {})
    key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    seen: dict = {}

    def exchange(request):
        form = dict(urllib.parse.parse_qsl(request.body))
        seen["exchange"] = form
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(form["code_verifier"].encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        if form.get("code") != "good-code" or challenge != seen["challenge"]:
            return 400, {}, json.dumps({"error": "invalid_grant"})
        now = int(time.time())
        claims = {"sub": "tenant-oidc", "iss": ISSUER, "aud": AUDIENCE, "iat": now,
                  "exp": now + 600}  # fmt: skip
        access = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key, algorithms=["RS256"])
        body = {"access_token": access, "token_type": "Bearer", "expires_in": 600}
        return 200, {"Content-Type": "application/json"}, json.dumps(body)

    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.get(
            ISSUER + ".well-known/openid-configuration",
            json={
                "issuer": ISSUER,
                "jwks_uri": ISSUER + "jwks.json",
                "authorization_endpoint": ISSUER + "authorize",
                "token_endpoint": ISSUER + "oauth/token",
            },
        )
        mock.get(ISSUER + "jwks.json", json=KeySet([key]).as_dict(private=False))
        mock.add_callback(responses.POST, ISSUER + "oauth/token", callback=exchange)
        app = make_app(
            OIDC_ISSUER=ISSUER,
            JWT_AUDIENCE=AUDIENCE,
            CONSOLE_OIDC_CLIENT_ID="memsvc-console",
            **settings,
        )
        yield app.test_client(), seen


def authorize(client, seen, **options):
    """Start a sign-in; returns the authorization request's parameters."""
    page = client.get("/console/sign-in", **options).get_data(as_text=True)
    assert "Sign in with your identity provider" in page
    started = client.get("/console/sign-in/oidc", **options)
    assert started.status_code == 302
    url = urllib.parse.urlsplit(started.headers["Location"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == ISSUER + "authorize"
    params = dict(urllib.parse.parse_qsl(url.query))
    seen["challenge"] = params["code_challenge"]
    return params


def test_key_management_signs_in_at_the_provider_with_pkce(provider):
    client, seen = provider
    params = authorize(client, seen)
    assert params["response_type"] == "code" and params["client_id"] == "memsvc-console"
    assert params["code_challenge_method"] == "S256" and len(params["state"]) >= 20
    assert params["redirect_uri"] == "http://localhost/console/sign-in/oidc/callback"
    assert params["nonce"] and params["audience"] == AUDIENCE and params["scope"] == "openid"
    back = client.get(
        "/console/sign-in/oidc/callback",
        query_string={"code": "good-code", "state": params["state"]},
    )
    assert back.status_code == 200
    assert re.search(r'http-equiv="refresh" content="0;url=/console/sign-in/oidc/done"', back.text)
    assert seen["exchange"]["grant_type"] == "authorization_code"
    done = client.get("/console/sign-in/oidc/done")
    assert done.status_code == 302 and done.headers["Location"].endswith("/console/keys")
    keys = client.get("/console/keys")
    assert keys.status_code == 200 and "tenant-oidc" in keys.text
    # The token lives in the session only: the hand-over cookie is gone.
    assert client.get_cookie("memsvc_console_oidc", path="/console") is None


def test_a_callback_with_another_state_is_refused(provider):
    client, seen = provider
    authorize(client, seen)
    back = client.get(
        "/console/sign-in/oidc/callback", query_string={"code": "good-code", "state": "forged"}
    )
    assert back.status_code == 400 and "state this browser did not start" in back.text
    assert "exchange" not in seen
    assert client.get("/console/keys").status_code == 302


def test_a_code_the_provider_refuses_signs_no_one_in(provider):
    client, seen = provider
    params = authorize(client, seen)
    back = client.get(
        "/console/sign-in/oidc/callback", query_string={"code": "bad", "state": params["state"]}
    )
    assert back.status_code == 400 and "could not be exchanged" in back.text
    assert client.get("/console/sign-in/oidc/done").status_code == 302
    assert client.get("/console/keys").status_code == 302


def test_without_a_client_id_there_is_no_provider_sign_in(make_app):
    client = make_app().test_client()
    assert "identity provider</a>" not in client.get("/console/sign-in").text
    assert client.get("/console/sign-in/oidc").status_code == 404


@pytest.mark.parametrize("provider", [{"PUBLIC_URL": "https://memory.example.com"}], indirect=True)
def test_the_redirect_uri_is_the_public_urls_not_the_host_headers(provider):
    client, seen = provider
    params = authorize(client, seen, headers={"Host": "evil.example"})
    callback = "https://memory.example.com/console/sign-in/oidc/callback"
    assert params["redirect_uri"] == callback
    back = client.get(
        "/console/sign-in/oidc/callback",
        query_string={"code": "good-code", "state": params["state"]},
        headers={"Host": "evil.example"},
    )
    assert back.status_code == 200
    assert seen["exchange"]["redirect_uri"] == callback


def test_the_providers_error_text_is_never_shown(provider):
    client, seen = provider
    params = authorize(client, seen)
    planted = "Your account is locked: call +1 555 0100 now"
    back = client.get(
        "/console/sign-in/oidc/callback",
        query_string={"error": planted, "error_description": planted, "state": params["state"]},
    )
    assert back.status_code == 400 and "identity provider refused" in back.text
    assert "555 0100" not in back.text and "locked" not in back.text
    # A code OAuth defines is named.
    params = authorize(client, seen)
    back = client.get(
        "/console/sign-in/oidc/callback",
        query_string={"error": "access_denied", "state": params["state"]},
    )
    assert back.status_code == 400 and "access_denied" in back.text


def test_a_sign_in_at_the_provider_never_joins_a_planted_session(provider):
    client, seen = provider
    app = client.application
    with app.app_context():
        attackers = keys.create(store(), "tenant-attacker", "his", "memsvc").secret
    attacker = app.test_client()
    assert sign_in(attacker, attackers).status_code == 302
    planted = attacker.get_cookie("memsvc_console", path="/console").value
    client.set_cookie("memsvc_console", planted, path="/console")
    params = authorize(client, seen)
    client.get(
        "/console/sign-in/oidc/callback",
        query_string={"code": "good-code", "state": params["state"]},
    )
    assert client.get("/console/sign-in/oidc/done").status_code == 302
    assert "tenant-oidc" in client.get("/console/keys").text
    # The attacker's key is not signed in beside her token.
    users = client.get("/console/users")
    assert users.status_code == 302 and "/console/sign-in" in users.headers["Location"]


def test_a_discovery_document_is_checked_as_the_api_checks_it(make_app):
    """One discovery and one check for the console's sign-in and the API's keys: an endpoint
    over plain http, or a document naming another issuer, is refused by both."""
    documents = [
        {"issuer": ISSUER, "jwks_uri": ISSUER + "jwks.json",
         "authorization_endpoint": ISSUER + "authorize",
         "token_endpoint": "http://login.example.test/oauth/token"},
        {"issuer": "https://other.example.test/", "jwks_uri": ISSUER + "jwks.json",
         "authorization_endpoint": ISSUER + "authorize", "token_endpoint": ISSUER + "oauth/token"},
    ]  # fmt: skip
    key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    now = int(time.time())
    token = jwt.encode(
        {"alg": "RS256", "kid": "k1"},
        {"sub": "t", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600},
        key,
        algorithms=["RS256"],
    )
    for document in documents:
        with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
            mock.get(ISSUER + ".well-known/openid-configuration", json=document)
            mock.get(ISSUER + "jwks.json", json=KeySet([key]).as_dict(private=False))
            app = make_app(
                OIDC_ISSUER=ISSUER, JWT_AUDIENCE=AUDIENCE, CONSOLE_OIDC_CLIENT_ID="memsvc-console"
            )
            client = app.test_client()
            started = client.get("/console/sign-in/oidc")
            assert started.status_code == 502, started.text[:300]
            assert "discovery document is unusable" in started.text
            api = client.get("/trpc/keys.list", headers={"Authorization": f"Bearer {token}"})
            assert api.status_code == 401
