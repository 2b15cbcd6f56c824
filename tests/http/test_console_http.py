"""The console's edges through Flask's test client: off when told, hardened headers."""

import re

from memsvc.api.context import store
from memsvc.services import keys


def sign_in(client, secret, what="key", **options):
    """Sign in as a person does: the form's token first, then the secret typed into it."""
    form = client.get("/console/sign-in", **options).get_data(as_text=True)
    # The sign-in form's token (a signed-in page's header carries the session's first).
    csrf = re.findall(r'name="csrf" value="([^"]+)"', form)[-1]
    return client.post(
        "/console/sign-in", data={"csrf": csrf, "what": what, "secret": secret}, **options
    )


def csrf_of(page):
    """The session's CSRF token, from a signed-in page's sign-out form."""
    return re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True)).group(1)


def test_the_console_can_be_turned_off(make_app):
    client = make_app(CONSOLE=False).test_client()
    assert client.get("/console/").status_code == 404
    assert client.get("/console/sign-in").status_code == 404


def test_every_console_answer_is_hardened(client):
    for path in ["/console/sign-in", "/console/users", "/console/static/console.css"]:
        response = client.get(path)
        csp = response.headers["Content-Security-Policy"]
        assert "'unsafe-inline'" not in csp and "frame-ancestors 'none'" in csp, path
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        response.close()


def test_signing_in_goes_through_the_api_keys_checks(app, client):
    with app.app_context():
        secret = keys.create(store(), "tenant-A", "t", "memsvc").secret
        record = keys.list_for(store(), "tenant-A")[0]
    assert sign_in(client, secret).status_code == 302
    page = client.get("/console/users")
    assert page.status_code == 200 and "tenant-A" in page.get_data(as_text=True)
    assert secret not in page.get_data(as_text=True)
    # lastUsedAt moved: the console's calls are the key's calls.
    with app.app_context():
        assert keys.list_for(store(), "tenant-A")[0].last_used_at is not None
        keys.revoke(store(), "tenant-A", record.id)
    gone = client.get("/console/users")
    assert gone.status_code == 302 and "why=key" in gone.headers["Location"]


def test_a_post_without_the_forms_token_is_refused(app, client):
    with app.app_context():
        secret = keys.create(store(), "tenant-A", "t", "memsvc").secret
    sign_in(client, secret)
    refused = client.post("/console/user/delete-all", data={"id": "u", "confirm": "u"})
    assert refused.status_code == 403
    other_site = client.post(
        "/console/sign-in",
        data={"what": "key", "secret": secret},
        headers={"Origin": "https://evil.example"},
    )
    assert other_site.status_code == 403


def test_the_session_cookie_is_httponly_strict_and_scoped(app, client):
    with app.app_context():
        secret = keys.create(store(), "tenant-A", "t", "memsvc").secret
    response = sign_in(client, secret)
    cookie = [c for c in response.headers.getlist("Set-Cookie") if c.startswith("memsvc_console=")]
    assert cookie and "HttpOnly" in cookie[0] and "SameSite=Strict" in cookie[0]
    assert "Path=/console" in cookie[0] and secret not in cookie[0]
    https = client.get("/console/users", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in https.headers["Set-Cookie"]


def test_an_expired_token_ends_key_management_but_not_the_key_session(make_app):
    import time

    app = make_app(JWT_SECRET="s" * 40, JWT_LEEWAY_SECONDS=0)
    client = app.test_client()
    with app.app_context():
        from memsvc.api.context import runtime

        secret = keys.create(store(), "tenant-A", "t", "memsvc").secret
        token = runtime().tokens.mint("tenant-A", ttl=2)
    sign_in(client, secret)
    form = client.get("/console/sign-in").get_data(as_text=True)
    # The sign-in form's token (the header's sign-out form carries the session's).
    csrf = re.findall(r'name="csrf" value="([^"]+)"', form)[-1]
    signed = client.post("/console/sign-in", data={"csrf": csrf, "what": "token", "secret": token})
    assert signed.status_code == 302, re.findall(r"<p class=.error.*?</p>", signed.text)
    assert signed.headers["Location"].endswith("/console/keys")
    assert client.get("/console/keys").status_code == 200
    time.sleep(3)
    expired = client.get("/console/keys")
    assert expired.status_code == 302 and "why=token" in expired.headers["Location"]
    assert client.get("/console/keys").status_code == 302  # the token is gone for good
    assert client.get("/console/users").status_code == 200  # the key is still signed in


def test_a_refused_input_is_worded_as_the_api_words_it(client, key):
    """The console runs a procedure the way the wire does: the same checks, the same message."""
    import html
    import json

    sign_in(client, key)
    user_id = "u" * 300
    api = client.get(
        "/trpc/memory.getAll",
        query_string={"input": json.dumps({"userId": user_id, "limit": 26})},
        headers={"x-api-key": key},
    ).json["error"]["message"]
    assert api.startswith("Invalid input: userId")
    page = client.get("/console/user", query_string={"id": user_id})
    assert html.escape(api, quote=False) in page.text
