"""The console as the operator sees it: its calls in the access log and the metrics, and the
URLs it sends browsers to."""

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from memsvc.api.context import store
from memsvc.services import keys
from tests.http.test_console_http import sign_in

TOKEN = "scrape-token-0123456789abcdef"


@pytest.fixture
def access_lines(caplog):
    caplog.set_level(logging.INFO, logger="memsvc.observability.access_log")

    def read():
        return [
            r.getMessage() for r in caplog.records if r.name == "memsvc.observability.access_log"
        ]

    return read


def counted(client, procedure, code="OK"):
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "memsvc_calls_total" and s.labels == {
                "procedure": procedure,
                "code": code,
            }:
                return s.value
    return 0.0


def test_console_calls_show_their_key_and_tenant_and_are_counted(make_app, access_lines):
    app = make_app(METRICS_TOKEN=TOKEN)
    with app.app_context():
        secret = keys.create(store(), "tenant-A", "console", "memsvc").secret
        key_id = keys.list_for(store(), "tenant-A")[0].id
    client = app.test_client()
    before = counted(client, "memory.users")
    sign_in(client, secret)
    assert client.get("/console/users").status_code == 200
    assert counted(client, "memory.users") == before + 1
    (line,) = [line for line in access_lines() if '"GET /console/users ' in line]
    assert "procedures=memory.users error=-" in line
    assert f"key={key_id}" in line and "tenant=tenant-A" in line
    # A refused sign-in is counted and logged as the refusal it is.
    refused_before = counted(client, "service.info", "UNAUTHORIZED")
    sign_in(app.test_client(), "sk_memsvc_" + "0" * 64)
    assert counted(client, "service.info", "UNAUTHORIZED") == refused_before + 1
    assert any(
        '"POST /console/sign-in ' in line and "error=UNAUTHORIZED" in line
        for line in access_lines()
    )


@pytest.mark.parametrize("public", [{}, {"PUBLIC_URL": "https://memory.example.com"}])
def test_no_redirect_names_the_requests_host(make_app, public):
    client = make_app(**public).test_client()
    answer = client.get("/console", headers={"Host": "evil.example"})
    assert answer.status_code in (301, 302, 308)
    # Relative: the browser stays where it is, whatever the Host header said.
    assert answer.headers["Location"] == "/console/"


def test_a_public_url_must_be_a_plain_http_url(make_app):
    from memsvc import ConfigError

    for wrong in ("memory.example.com", "ftp://memory.example.com", "https://x.example/?a=1",
                  "https://user:pw@x.example", "https://x.example/#top"):  # fmt: skip
        with pytest.raises(ConfigError, match="MEMSVC_PUBLIC_URL"):
            make_app(PUBLIC_URL=wrong)
