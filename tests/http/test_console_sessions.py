"""The console's sessions: each sign-in starts a new one, and a sign-out ends it everywhere."""

import errno

from memsvc.api.context import runtime
from memsvc.api.context import store
from memsvc.services import keys
from tests.http.test_console_http import csrf_of
from tests.http.test_console_http import sign_in

SECRET = "s" * 40
COOKIE = "memsvc_console"


def cookie(client):
    found = client.get_cookie(COOKIE, path="/console")
    return found.value if found is not None else None


def replaying(app, value):
    """Another browser (or an attacker) presenting a captured session cookie."""
    client = app.test_client()
    client.set_cookie(COOKIE, value, path="/console")
    return client


def new_sessions(response):
    """The session cookies a response sets, deletions aside."""
    return [
        c
        for c in response.headers.getlist("Set-Cookie")
        if c.startswith(COOKIE + "=") and not c.startswith(COOKIE + "=;")
    ]


def test_a_sign_in_never_joins_a_planted_session(make_app):
    app = make_app(JWT_SECRET=SECRET)
    with app.app_context():
        attackers_token = runtime().tokens.mint("tenant-attacker")
        her_key = keys.create(store(), "tenant-victim", "hers", "memsvc").secret
    attacker = app.test_client()
    assert sign_in(attacker, attackers_token, what="token").status_code == 302
    # The attacker's session cookie, planted in her browser before she signs in.
    victim = replaying(app, cookie(attacker))
    assert sign_in(victim, her_key).status_code == 302
    assert cookie(victim) != cookie(attacker)
    users = victim.get("/console/users")
    assert users.status_code == 200 and "tenant-victim" in users.text
    assert "tenant-attacker" not in users.text
    # Key management is not the attacker's: it asks her to sign in for it.
    managed = victim.get("/console/keys")
    assert managed.status_code == 302 and "what=token" in managed.headers["Location"]


def test_a_key_and_a_token_of_one_tenant_stay_signed_in_together(make_app):
    app = make_app(JWT_SECRET=SECRET)
    with app.app_context():
        token = runtime().tokens.mint("tenant-A")
        key = keys.create(store(), "tenant-A", "k", "memsvc").secret
    client = app.test_client()
    assert sign_in(client, key).status_code == 302
    first = cookie(client)
    assert sign_in(client, token, what="token").status_code == 302
    assert cookie(client) != first
    assert client.get("/console/users").status_code == 200
    assert client.get("/console/keys").status_code == 200


def test_a_cookie_captured_before_sign_out_is_refused_by_every_server_after_it(app, make_app, key):
    # Two servers on one database (each its own runtime, as separate processes have).
    other = make_app()
    client = app.test_client()
    assert sign_in(client, key).status_code == 302
    captured = cookie(client)
    page = client.get("/console/users")
    assert replaying(other, captured).get("/console/users").status_code == 200
    out = client.post("/console/sign-out", data={"csrf": csrf_of(page)})
    assert out.status_code == 302 and "why=out" in out.headers["Location"]
    for server in (app, other, app):
        replay = replaying(server, captured).get("/console/users")
        assert replay.status_code == 302 and "/console/sign-in" in replay.headers["Location"]
        # Refused, and nothing renewed: no session cookie comes back.
        assert new_sessions(replay) == []


def test_a_replaced_session_is_ended_too(app, key):
    """Signing in again (a token beside a key, or another key) ends the session it replaces."""
    client = app.test_client()
    assert sign_in(client, key).status_code == 302
    before = cookie(client)
    assert sign_in(client, key).status_code == 302
    assert replaying(app, before).get("/console/users").status_code == 302
    assert client.get("/console/users").status_code == 200


def test_sign_out_from_another_site_is_refused(client, key):
    sign_in(client, key)
    page = client.get("/console/users")
    refused = client.post(
        "/console/sign-out",
        data={"csrf": csrf_of(page)},
        headers={"Origin": "https://evil.example"},
    )
    assert refused.status_code == 403
    assert client.get("/console/users").status_code == 200


def test_a_sign_out_that_cannot_be_recorded_says_so(app, key, monkeypatch):
    client = app.test_client()
    sign_in(client, key)
    page = client.get("/console/users")

    def full(session_id, until):
        raise OSError(errno.ENOSPC, "No space left on device")

    # The disk (or the database) takes no more writes.
    monkeypatch.setattr(app.extensions["memsvc"].backend.signouts, "end", full)
    out = client.post("/console/sign-out", data={"csrf": csrf_of(page)})
    assert out.status_code == 302 and "why=out-here" in out.headers["Location"]
    assert "could not record the sign-out" in client.get(out.headers["Location"]).text
    # This browser is signed out all the same.
    assert client.get("/console/users").status_code == 302
