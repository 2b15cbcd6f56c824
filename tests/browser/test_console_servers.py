"""One console session across two servers on one database, each with its two gunicorn workers:
a sign-out on one ends the session on every worker of both."""

from __future__ import annotations

import secrets
import typing as t
import uuid

import pytest
import requests

from tests.browser.conftest import new_page
from tests.browser.conftest import sign_in
from tests.support import postgres
from tests.support.servers import Server
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

COOKIE = "memsvc_console"


@pytest.fixture
def servers(store_kind, tmp_path) -> t.Iterator[tuple[Server, Server]]:
    """Two servers sharing a database (a SQLite file, or a PostgreSQL database) and the
    console's secret, as servers behind one load balancer do."""
    url = postgres.fresh_database("console_servers") if store_kind == "postgres" else None
    shared = {
        "MEMSVC_DATABASE": url or str(tmp_path / "memsvc.sqlite3"),
        "MEMSVC_LIMITS_DIR": str(tmp_path / "limits"),
        "MEMSVC_CONSOLE_SECRET_KEY": secrets.token_urlsafe(32),
    }
    started: list[Server] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            started.append(start_server(tmp_path / name, **shared))
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()
        if url is not None:
            postgres.drop_database(url)


def test_a_sign_out_on_one_server_ends_the_session_on_every_worker_of_both(browser, watch, servers):
    a, b = servers
    key = a.create_key(f"t-{uuid.uuid4().hex[:8]}", "console")
    page = new_page(browser, watch)
    try:
        sign_in(page, a, key)
        (captured,) = [c["value"] for c in page.context.cookies() if c["name"] == COOKIE]
        # Cookies know hosts, not ports: the browser is signed in to both.
        page.goto(b.url + "/console/users")
        assert page.url.endswith("/console/users")
        with page.expect_navigation():
            page.get_by_role("button", name="Sign out").click()
        assert "Signed out" in page.content()
    finally:
        page.context.close()
    # The cookie as it was before the sign-out, replayed to each server
    # often enough to reach both of its workers.
    for server in (a, b) * 4:
        replay = requests.get(
            server.url + "/console/users",
            cookies={COOKIE: captured},
            allow_redirects=False,
            timeout=30,
        )
        assert replay.status_code == 302, server.url
        assert "/console/sign-in" in replay.headers["Location"]
        renewed = [
            c for c in replay.raw.headers.getlist("Set-Cookie") if c.startswith(COOKIE + "=")
        ]
        assert all(c.startswith(COOKIE + '=""') or c.startswith(COOKIE + "=;") for c in renewed)
    assert watch.errors == []
