"""memsvc export and memsvc import: a round trip gives the same answers, byte for byte."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import psycopg
import pytest

from memsvc import clock
from memsvc.api.context import store
from memsvc.services import keys
from memsvc.services import transfer
from tests.support import postgres
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query
from tests.support.servers import MODEL_CACHE
from tests.support.servers import REPO

LONG = " ".join(f"On day {i} we visited museum number {i} in the rain." for i in range(60))


def key_for(app, tenant: str) -> dict[str, str]:
    with app.app_context():
        return {"x-api-key": keys.create(store(), tenant, "k", "memsvc").secret}


def fill(app) -> dict[str, dict[str, str]]:
    client = app.test_client()
    auth = {t: key_for(app, t) for t in ("acme", "globex")}
    later = clock.iso(clock.now_ms() + 86_400_000)
    for tenant in auth:
        for user in ("alice", "bob"):
            for i in range(4):
                body = {
                    "userId": user,
                    "content": f"{tenant} {user} fact {i}: likes tea number {i}",
                    "metadata": {"z": i, "a": [i, "x"], "nested": {"k": tenant}},
                }
                if i == 3:
                    body["expiresAt"] = later
                m = data(mutate(client, "memory.add", body, headers=auth[tenant]))
            mutate(
                client, "memory.update", {"id": m["id"], "content": "changed"}, headers=auth[tenant]
            )
    data(mutate(client, "memory.add", {"userId": "alice", "content": LONG}, headers=auth["acme"]))
    return auth


def answers(app, auth) -> list[bytes]:
    client = app.test_client()
    out = []
    for headers in auth.values():
        for user in ("alice", "bob"):
            out.append(query(client, "memory.getAll", {"userId": user}, headers=headers).data)
            for text in ("tea", "museum in the rain", "changed"):
                body = {"userId": user, "query": text, "threshold": 0, "limit": 100}
                out.append(query(client, "memory.search", body, headers=headers).data)
            first = json.loads(out[-4])["result"]["data"][0]["id"]
            out.append(query(client, "memory.history", {"id": first}, headers=headers).data)
    return out


def test_export_then_import_into_a_fresh_database_answers_byte_for_byte_the_same(
    make_app, memsvc_cli, cli_context, tmp_path, monkeypatch
):
    monkeypatch.setattr(transfer, "EXPORT_BATCH", 4)  # 17 memories: five rounds of reads
    source = make_app()
    auth = fill(source)
    before = answers(source, auth)
    path = tmp_path / "export.jsonl"
    result = memsvc_cli("export", str(path))
    assert result.exit_code == 0, result.output
    assert "Exported 17 memories and 2 API keys." in result.stderr
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["model"] == "local:all-MiniLM-L6-v2" and header["memories"] == 17
    assert header["version"] == 3 and header["apiKeys"] == 2
    assert oct(path.stat().st_mode)[-3:] == "600"
    # Keys travel as the hashes the database keeps, never as secrets.
    assert not any(h["x-api-key"] in path.read_text() for h in auth.values())

    fresh_db = str(tmp_path / "fresh.sqlite3")
    cli_context.overrides = {**cli_context.overrides, "DATABASE": fresh_db}
    # A whole database's export: every tenant in it, said explicitly.
    result = memsvc_cli("import", str(path), "--all-tenants")
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == "Imported 17 memories and 2 API keys."
    target = make_app(DATABASE=fresh_db)
    # Callers keep their keys: the same requests get the same bytes.
    assert answers(target, auth) == before

    # Idempotent: a second run adds nothing.
    again = memsvc_cli("import", str(path), "--all-tenants")
    assert (
        "Imported 0 memories and 0 API keys (17 memories already there; "
        "2 API keys already there)." in again.stderr
    )
    assert answers(target, auth) == before


@pytest.mark.stores("sqlite")
def test_moving_from_sqlite_to_postgresql_and_back_answers_byte_for_byte_the_same(
    make_app, memsvc_cli, cli_context, tmp_path
):
    """The documented move: memsvc export from the file, memsvc import into PostgreSQL."""
    source = make_app()
    auth = fill(source)
    before = answers(source, auth)
    path = tmp_path / "export.jsonl"
    assert memsvc_cli("export", str(path)).exit_code == 0
    url = postgres.fresh_database("moving")
    target = None
    try:
        cli_context.overrides = {**cli_context.overrides, "DATABASE": url}
        result = memsvc_cli("import", str(path), "--all-tenants")
        assert result.stderr.strip() == "Imported 17 memories and 2 API keys.", result.output
        # The planner has statistics of the imported rows at once, not after
        # autovacuum's first round (without them a large user's vectors were
        # read whole to load one).
        with psycopg.connect(url) as conn:
            analyzed = conn.execute(
                "SELECT count(DISTINCT tablename) FROM pg_stats "
                "WHERE tablename IN ('memories', 'memory_vectors', 'memory_history')"
            ).fetchone()
        assert analyzed == (3,)
        target = make_app(DATABASE=url)
        assert answers(target, auth) == before  # with the callers' own keys
        # And back: PostgreSQL's export imports into a new file the same way
        # (the keys' lastUsedAt moved on with the answers above).
        back = tmp_path / "back.jsonl"
        assert memsvc_cli("export", str(back)).exit_code == 0

        def memory_lines(p):
            return [x for x in p.read_text().splitlines()[1:] if not x.startswith('{"apiKey"')]

        def key_ids(p):
            return [json.loads(x)["apiKey"]["id"] for x in p.read_text().splitlines()[1:3]]

        assert memory_lines(back) == memory_lines(path)
        assert key_ids(back) == key_ids(path)
    finally:
        if target is not None:
            target.extensions["memsvc"].close()
        postgres.drop_database(url)


def test_import_resumes_after_an_interruption(make_app, memsvc_cli, cli_context, tmp_path):
    auth = fill(make_app())
    path = tmp_path / "all.jsonl"
    memsvc_cli("export", str(path))
    lines = path.read_text().splitlines(keepends=True)
    half = tmp_path / "half.jsonl"
    half.write_text("".join(lines[:11]))  # as if the run stopped after 2 keys and 8 memories
    cli_context.overrides = {**cli_context.overrides, "DATABASE": str(tmp_path / "new.sqlite3")}
    tenants = ("--tenant", "acme", "--tenant", "globex")
    assert "Imported 8 memories and 2 API keys." in memsvc_cli("import", str(half), *tenants).stderr
    assert (
        "Imported 9 memories and 0 API keys (8 memories already there; 2 API keys already there)."
        in memsvc_cli("import", str(path), *tenants).stderr
    )
    target = make_app(DATABASE=str(tmp_path / "new.sqlite3"))
    with target.app_context():
        assert store().conn.execute("SELECT count(*) FROM memories").fetchone() == (17,)
    assert auth


def test_a_line_broken_after_the_check_stops_the_import_with_the_lines_before_it_in(
    make_app, memsvc_cli, cli_context, tmp_path
):
    fill(make_app())
    path = tmp_path / "all.jsonl"
    memsvc_cli("export", str(path))
    lines = path.read_text().splitlines(keepends=True)
    target = make_app(DATABASE=str(tmp_path / "new.sqlite3"))
    with target.app_context():
        rules = transfer.Rules.from_settings(target.config, None)
        checked = transfer.check(store(), lines, rules)
        # The file as the import reads it: its 9th memory line broken since the check.
        changed = list(lines)
        broken = json.loads(changed[11])
        broken["createdAt"] = "last tuesday"
        changed[11] = json.dumps(broken) + "\n"
        embedder = target.extensions["memsvc"].embedder
        with pytest.raises(transfer.InvalidImport) as e:
            transfer.import_(store(), embedder, changed, checked, rules, batch_size=1000)
        assert "line 12:" in str(e.value) and "before this line were imported" in str(e.value)
        # Two key lines and a header before it: the 8 memories before it are in, as it says.
        assert store().conn.execute("SELECT count(*) FROM memories").fetchone() == (8,)


def test_a_malformed_line_is_named_and_nothing_is_imported(
    make_app, memsvc_cli, cli_context, tmp_path
):
    fill(make_app())
    path = tmp_path / "export.jsonl"
    memsvc_cli("export", str(path))
    lines = path.read_text().splitlines(keepends=True)
    broken = json.loads(lines[5])
    broken["createdAt"] = "last tuesday"
    lines[5] = json.dumps(broken) + "\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines))
    cli_context.overrides = {**cli_context.overrides, "DATABASE": str(tmp_path / "new.sqlite3")}
    result = memsvc_cli("import", str(bad), "--all-tenants")
    assert result.exit_code == 1
    assert "line 6: createdAt must be an ISO 8601 timestamp" in result.stderr
    assert "nothing was imported" in result.stderr
    for damage, message in (
        ("{not json", "line 2: not JSON"),
        ('{"id": "x"}', "line 2: tenant is required"),
        (
            '{"apiKey": {"id": "k", "tenant": "acme", "secretHash": "ab"}}',
            "line 2: apiKey.secretHash must be 64 hexadecimal digits",
        ),
        (lines[1].strip() + "\n" + lines[1].strip(), "line 3: the key"),
    ):
        bad.write_text(lines[0] + damage + "\n")
        assert message in memsvc_cli("import", str(bad), "--all-tenants").stderr
    bad.write_text('{"format": "something else"}\n')
    assert "line 1: not a memsvc-export header" in memsvc_cli("import", str(bad)).stderr
    target = make_app(DATABASE=str(tmp_path / "new.sqlite3"))
    with target.app_context():
        assert store().conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_vectors_of_another_model_are_embedded_again(make_app, memsvc_cli, cli_context, tmp_path):
    auth = fill(make_app())
    path = tmp_path / "export.jsonl"
    memsvc_cli("export", str(path), "--tenant", "acme", "--user", "alice")
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    assert (header["tenant"], header["userId"], header["memories"]) == ("acme", "alice", 5)
    header["model"], header["dimensions"] = "openai:text-embedding-3-small", 1536
    for i in range(1, len(lines)):
        record = json.loads(lines[i])
        record.pop("vectors")
        lines[i] = json.dumps(record) + "\n"
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    cli_context.overrides = {**cli_context.overrides, "DATABASE": str(tmp_path / "new.sqlite3")}
    result = memsvc_cli("import", str(path))
    assert "Imported 5 memories (embedded again with local:all-MiniLM-L6-v2)." in result.stderr
    target = make_app(DATABASE=str(tmp_path / "new.sqlite3"))
    headers = key_for(target, "acme")
    body = {"userId": "alice", "query": "acme alice fact 1: likes tea number 1", "threshold": 0}
    found = data(query(target.test_client(), "memory.search", body, headers=headers))
    assert found[0]["content"] == "acme alice fact 1: likes tea number 1"
    assert found[0]["similarity"] > 0.99
    assert auth


def test_a_progress_bar_on_a_terminal_and_silence_in_a_pipe(make_app, tmp_path, db_path):
    fill(make_app())
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")},
        "MEMSVC_DATABASE": db_path,
        "MEMSVC_MODEL_CACHE_DIR": os.environ["MEMSVC_MODEL_CACHE_DIR"],
    }
    command = [sys.executable, "-m", "memsvc.cli", "export", str(tmp_path / "x.jsonl")]
    piped = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert piped.stderr.strip() == "Exported 17 memories and 2 API keys."
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run(
            command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=secondary, timeout=120
        )
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    assert proc.returncode == 0
    text = shown.decode()
    assert "exporting  [####################################]  17/17" in text  # click's bar
    assert "Exported 17 memories and 2 API keys." in text


def shm_limit_folders() -> set[str]:
    """The limiter folders of this user's SQLite databases on /dev/shm (none elsewhere)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"memsvc-limits-{os.getuid()}-")}


@pytest.mark.stores("sqlite")  # a PostgreSQL database is never created by memsvc
def test_a_refused_import_into_a_new_database_leaves_nothing_behind(make_app, tmp_path):
    fill(make_app())
    source = tmp_path / "export.jsonl"
    env = {
        "PATH": os.environ["PATH"],
        "MEMSVC_DATABASE": str(tmp_path / "memsvc.sqlite3"),
        "MEMSVC_MODEL_CACHE_DIR": MODEL_CACHE,
        "MEMSVC_LIMITS_DIR": str(tmp_path / "limits"),
    }

    def memsvc(*args: str, **settings: str) -> subprocess.CompletedProcess:
        # A setting given as None is left out: its default applies.
        given = {k: v for k, v in {**env, **settings}.items() if v is not None}
        return subprocess.run(
            [sys.executable, "-m", "memsvc.cli", *args],
            capture_output=True,
            text=True,
            env=given,
            cwd=tmp_path,
            timeout=120,
        )

    assert memsvc("export", str(source)).returncode == 0
    lines = source.read_text().splitlines(keepends=True)
    broken = json.loads(lines[3])
    broken["createdAt"] = "last tuesday"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:3] + [json.dumps(broken) + "\n"] + lines[4:]))
    folder = tmp_path / "new"
    folder.mkdir()
    target = {"MEMSVC_DATABASE": str(folder / "memsvc.sqlite3")}
    before = shm_limit_folders()
    # The limiter's default folder (on /dev/shm, named after the new file) too.
    result = memsvc("import", str(bad), "--all-tenants", **target, MEMSVC_LIMITS_DIR=None)
    assert result.returncode == 1
    assert "line 4: createdAt must be an ISO 8601 timestamp" in result.stderr
    assert "nothing was imported" in result.stderr
    assert memsvc("import", str(bad), **target).returncode == 1  # its tenants not named
    assert list(folder.iterdir()) == []  # no database, no -wal, no -shm
    assert shm_limit_folders() == before
    # A database that was there before stays, as it was.
    assert memsvc("init-db", **target).returncode == 0
    made = sorted(p.name for p in folder.iterdir())
    assert memsvc("import", str(bad), "--all-tenants", **target).returncode == 1
    assert sorted(p.name for p in folder.iterdir()) == made
    # And an import that goes through creates it as ever.
    (folder / "memsvc.sqlite3").unlink()
    result = memsvc("import", str(source), "--all-tenants", **target)
    assert result.returncode == 0, result.stderr
    assert "Imported 17 memories and 2 API keys." in result.stderr


def test_a_version_1_file_without_keys_still_imports(make_app, memsvc_cli, cli_context, tmp_path):
    fill(make_app())
    path = tmp_path / "export.jsonl"
    memsvc_cli("export", str(path))
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["version"] = 1
    del header["apiKeys"]
    old = [json.dumps(header) + "\n"] + [x for x in lines[1:] if not x.startswith('{"apiKey"')]
    path.write_text("".join(old))
    cli_context.overrides = {**cli_context.overrides, "DATABASE": str(tmp_path / "new.sqlite3")}
    result = memsvc_cli("import", str(path), "--all-tenants")
    assert result.stderr.strip() == "Imported 17 memories."
    header["version"] = 4
    path.write_text(json.dumps(header) + "\n")
    assert "format version 4 is not supported" in memsvc_cli("import", str(path)).stderr


def test_conversations_survive_a_round_trip_byte_for_byte(
    make_app, memsvc_cli, cli_context, tmp_path
):
    source = make_app()
    auth = key_for(source, "acme")
    client = source.test_client()
    talk = [
        {"role": "user", "name": "Ana", "content": "I moved to Porto yesterday", "id": "m1",
         "at": "2024-03-05T23:30:00-07:00"},
        {"role": "assistant", "content": "How is the new flat?"},
        {"role": "user", "name": "Ana", "content": "Small but bright.", "id": "m3"},
    ]  # fmt: skip
    data(mutate(client, "memory.ingest", {"userId": "ana", "sessionId": "s1", "messages": talk},
                headers=auth))  # fmt: skip
    data(mutate(client, "memory.ingest", {"userId": "ana", "messages": talk[:1]}, headers=auth))
    note = {"userId": "ana", "content": "Ana's birthday", "occurredAt": "1990-07-01T00:00:00+02:00"}
    data(mutate(client, "memory.add", note, headers=auth))

    def seen(app) -> list[bytes]:
        c = app.test_client()
        sessions = query(c, "memory.sessions", {"userId": "ana"}, headers=auth)
        out = [sessions.data, query(c, "memory.getAll", {"userId": "ana"}, headers=auth).data]
        for s in json.loads(sessions.data)["result"]["data"]:
            body = {"userId": "ana", "sessionId": s["sessionId"]}
            out.append(query(c, "memory.session", body, headers=auth).data)
        return out

    before = seen(source)
    path = tmp_path / "export.jsonl"
    assert memsvc_cli("export", str(path)).exit_code == 0
    fresh_db = str(tmp_path / "fresh.sqlite3")
    cli_context.overrides = {**cli_context.overrides, "DATABASE": fresh_db}
    result = memsvc_cli("import", str(path), "--all-tenants")
    assert result.exit_code == 0, result.output
    target = make_app(DATABASE=fresh_db)
    assert seen(target) == before
    # The session goes on from where it was, and its ids are still known.
    again = data(
        mutate(target.test_client(), "memory.ingest",
               {"userId": "ana", "sessionId": "s1", "messages": talk + [
                   {"role": "user", "content": "New one"}]}, headers=auth)
    )  # fmt: skip
    # The message without an id is new again: positions 3 and 4.
    assert again["duplicates"] == 2 and again["memories"][-1]["position"] == 4
