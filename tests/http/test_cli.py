import pathlib
import stat
import subprocess
import sys

from memsvc.cli import cli
from tests.support.helpers import data
from tests.support.helpers import query


def invoke(runner, *args):
    return runner.invoke(cli, list(args))


def test_keys_create_prints_only_the_secret_on_stdout(runner, client):
    result = invoke(runner, "keys", "create", "acme", "laptop")
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    assert secret.startswith("sk_memsvc_") and len(secret) == len("sk_memsvc_") + 64
    assert "shown only now" in result.stderr
    resp = query(client, "memory.getAll", {"userId": "u"}, headers={"x-api-key": secret})
    assert data(resp) == []


def test_keys_list_shows_keys_but_never_secrets(runner):
    secret = invoke(runner, "keys", "create", "acme", "laptop").stdout.strip()
    invoke(runner, "keys", "create", "other", "ci")
    result = invoke(runner, "keys", "list")
    assert result.exit_code == 0
    assert "acme" in result.stdout and "other" in result.stdout and "laptop" in result.stdout
    assert secret not in result.stdout
    only = invoke(runner, "keys", "list", "--tenant", "other").stdout
    assert "acme" not in only and "ci" in only


def test_keys_revoke_stops_the_key(runner, app, client):
    secret = invoke(runner, "keys", "create", "acme", "laptop").stdout.strip()
    with app.app_context():
        from memsvc.runtime import store

        [key] = store().list_keys("acme")
    result = invoke(runner, "keys", "revoke", key.id)
    assert result.exit_code == 0 and "Revoked" in result.stdout
    resp = query(client, "memory.getAll", {"userId": "u"}, headers={"x-api-key": secret})
    assert resp.status_code == 401
    missing = invoke(runner, "keys", "revoke", "00000000-0000-4000-8000-000000000000")
    assert missing.exit_code == 1 and "API key not found" in missing.stderr


def test_init_db_reports_the_database(runner, db_path):
    result = invoke(runner, "init-db")
    assert result.exit_code == 0
    assert db_path in result.stdout and "local:all-MiniLM-L6-v2 (384 dimensions)" in result.stdout


def test_reembed_re_embeds_every_memory(runner, client, auth):
    for i in range(3):
        client.post("/trpc/memory.add", json={"userId": "u", "content": f"m {i}"}, headers=auth)
    result = invoke(runner, "reembed", "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert "Done: 3 memories" in result.stderr
    found = data(query(client, "memory.search", {"userId": "u", "query": "m 1"}, headers=auth))
    assert found[0]["content"] == "m 1"


def test_a_bad_setting_is_one_line_on_the_command_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "memsvc.cli", "init-db"],
        capture_output=True,
        text=True,
        env={"MEMSVC_EMBEDDER": "nope", "MEMSVC_DATABASE": str(tmp_path / "db"), "PATH": ""},
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "Error: MEMSVC_EMBEDDER must be one of local, openai, got 'nope'"
    )


def test_init_db_creates_a_private_token_secret(runner, app):
    result = invoke(runner, "init-db")
    assert "Local token secret" in result.stdout
    path = pathlib.Path(app.instance_path, "jwt-secret")
    assert len(path.read_text().strip()) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_text()
    invoke(runner, "init-db")
    assert path.read_text() == before  # never replaced


def test_token_mints_a_token_the_service_accepts(runner, make_app):
    token = invoke(runner, "token", "acme", "--ttl", "120").stdout.strip()
    client = make_app().test_client()  # a new app reads the secret the command created
    resp = query(client, "keys.list", headers={"Authorization": f"Bearer {token}"})
    assert data(resp) == []


def test_token_refuses_in_oidc_mode(make_app):
    app = make_app(OIDC_ISSUER="https://idp.test", JWT_AUDIENCE="memsvc")
    result = app.test_cli_runner().invoke(cli, ["token", "acme"])
    assert result.exit_code == 1 and "identity provider" in result.stderr
