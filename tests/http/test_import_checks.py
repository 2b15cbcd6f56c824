"""memsvc import applies the API's rules to every line, and writes only the tenants it is told.

Files here are written by hand, as someone other than memsvc export could
write them; each is imported into the test's own database (SQLite, then
PostgreSQL) through the CLI.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import tracemalloc
import typing as t
import uuid

import numpy as np
import pytest

from memsvc import clock
from memsvc.api.context import embedder
from memsvc.api.context import store
from memsvc.services import keys
from memsvc.services import transfer
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

MODEL = "local:all-MiniLM-L6-v2"


def header(tenant: str | None = "acme", **fields: t.Any) -> dict[str, t.Any]:
    return {
        "format": "memsvc-export",
        "version": 2,
        "model": MODEL,
        "dimensions": 384,
        "exportedAt": clock.iso(clock.now_ms()),
        "tenant": tenant,
        "userId": None,
        **fields,
    }


def memory(tenant: str = "acme", user: str = "alice", **fields: t.Any) -> dict[str, t.Any]:
    """A memory line without vectors (import embeds its text)."""
    now = clock.iso(clock.now_ms())
    return {
        "id": str(uuid.uuid4()),
        "tenant": tenant,
        "userId": user,
        "content": "likes green tea",
        "metadata": {},
        "createdAt": now,
        "updatedAt": now,
        "expiresAt": None,
        "version": 1,
        "history": [],
        **fields,
    }


def api_key(tenant: str = "acme", secret: str | None = None, **fields: t.Any) -> dict[str, t.Any]:
    secret = secret or f"sk_memsvc_{secrets.token_hex(32)}"
    return {
        "apiKey": {
            "id": str(uuid.uuid4()),
            "tenant": tenant,
            "keyId": f"key_{secrets.token_hex(8)}",
            "name": "laptop",
            "secretHash": keys.hash_secret(secret).hex(),
            "createdAt": clock.iso(clock.now_ms()),
            "lastUsedAt": None,
            "revokedAt": None,
            "rateLimit": None,
            "concurrencyLimit": None,
            **fields,
        }
    }


def write(path, *lines: dict[str, t.Any]) -> str:
    # ensure_ascii: a lone surrogate travels as the escape "\ud800", as JSON allows.
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def counts(app) -> tuple[int, int]:
    """(memories, API keys) in the app's database."""
    with app.app_context():
        conn = t.cast(t.Any, store()).conn
        (memories,) = conn.execute("SELECT count(*) FROM memories").fetchone()
        (api_keys,) = conn.execute("SELECT count(*) FROM api_keys").fetchone()
    return int(memories), int(api_keys)


def refused(result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert message in result.stderr, result.stderr
    assert "nothing was imported" in result.stderr


# -- tenants -------------------------------------------------------------------------


def test_a_key_line_of_another_tenant_is_refused_and_its_secret_opens_nothing(
    make_app, memsvc_cli, tmp_path
):
    app = make_app()
    client = app.test_client()
    with app.app_context():
        bravo = {"x-api-key": keys.create(store(), "bravo", "own", "memsvc").secret}
    body = {"userId": "bob", "content": "bravo's secret"}
    data(mutate(client, "memory.add", body, headers=bravo))
    planted = f"sk_memsvc_{secrets.token_hex(32)}"
    line = api_key("bravo", planted)
    path = write(tmp_path / "acme.jsonl", header("acme"), line, memory("bravo", "bob"))
    result = memsvc_cli("import", path)
    refused(result, "line 2: apiKey.tenant is 'bravo', not a tenant being imported (acme)")
    assert line["apiKey"]["secretHash"] not in result.output
    assert counts(app) == (1, 1)
    resp = query(client, "memory.getAll", {"userId": "bob"}, headers={"x-api-key": planted})
    assert resp.status_code == 401


def test_a_memory_line_of_another_tenant_is_refused(make_app, memsvc_cli, tmp_path):
    app = make_app()
    lines = [header("acme"), memory("acme"), memory("acme"), memory("bravo", "bob")]
    result = memsvc_cli("import", write(tmp_path / "acme.jsonl", *lines), "--batch-size", "1")
    refused(result, "line 4: tenant is 'bravo', not a tenant being imported (acme)")
    assert counts(app) == (0, 0)


def test_a_whole_database_file_imports_only_the_tenants_named(make_app, memsvc_cli, tmp_path):
    app = make_app()
    acme, globex = api_key("acme"), api_key("globex")
    lines = [header(None), acme, globex, memory("acme"), memory("globex")]
    path = write(tmp_path / "all.jsonl", *lines)

    alone = memsvc_cli("import", path)
    refused(alone, "the file holds every tenant's data (its header's tenant is null)")
    assert "--tenant" in alone.stderr and "--all-tenants" in alone.stderr
    refused(memsvc_cli("import", path, "--tenant", "acme"), "line 3: apiKey.tenant is 'globex'")
    both = memsvc_cli("import", path, "--tenant", "acme", "--tenant", "globex")
    assert both.stderr.strip() == "Imported 2 memories and 2 API keys.", both.output
    assert counts(app) == (2, 2)

    clash = memsvc_cli("import", path, "--tenant", "acme", "--all-tenants")
    assert clash.exit_code == 2 and "not both" in clash.stderr
    bad = memsvc_cli("import", path, "--tenant", "acme\x1b[2J")
    assert bad.exit_code == 2 and "must not contain control characters" in bad.stderr


def test_all_tenants_imports_every_tenant_of_the_file(make_app, memsvc_cli, tmp_path):
    app = make_app()
    lines = [header(None), api_key("acme"), memory("acme"), memory("globex"), memory("initech")]
    result = memsvc_cli("import", write(tmp_path / "all.jsonl", *lines), "--all-tenants")
    assert result.stderr.strip() == "Imported 3 memories and 1 API key.", result.output
    assert counts(app) == (3, 1)


def test_a_tenant_file_imports_into_another_name_only_when_named(make_app, memsvc_cli, tmp_path):
    """--tenant replaces the header's tenant: a file of acme's is refused for --tenant bravo."""
    app = make_app()
    path = write(tmp_path / "acme.jsonl", header("acme"), memory("acme"))
    refused(memsvc_cli("import", path, "--tenant", "bravo"), "line 2: tenant is 'acme'")
    assert counts(app) == (0, 0)
    assert memsvc_cli("import", path, "--tenant", "acme").exit_code == 0
    assert counts(app) == (1, 0)


# -- text -----------------------------------------------------------------------------

SURROGATE = "\ud800"


def _history(content: str = "liked black tea", metadata: t.Any = None) -> dict[str, t.Any]:
    return {
        "version": 1,
        "content": content,
        "metadata": metadata or {},
        "event": "add",
        "at": clock.iso(clock.now_ms() - 1000),
    }


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"content": f"tea {SURROGATE}"}, "content"),
        ({"userId": f"alice{SURROGATE}"}, "userId"),
        ({"metadata": {f"k{SURROGATE}": 1}}, "metadata"),
        ({"metadata": {"k": [f"v{SURROGATE}"]}}, "metadata"),
        ({"version": 2, "history": [_history(f"tea {SURROGATE}")]}, "history[0].content"),
        ({"version": 2, "history": [_history(metadata={"k": SURROGATE})]}, "history[0].metadata"),
    ],
    ids=["content", "userId", "metadata-key", "metadata-value", "history", "history-metadata"],
)
def test_a_lone_surrogate_anywhere_is_refused_before_anything_is_written(
    make_app, memsvc_cli, tmp_path, fields, field
):
    app = make_app()
    lines = [header("acme"), memory(), memory(), memory(**fields)]
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", *lines), "--batch-size", "1")
    refused(result, f"line 4: {field} must be valid Unicode text (it has a lone surrogate)")
    assert counts(app) == (0, 0)


def test_a_lone_surrogate_in_a_key_name_is_refused(make_app, memsvc_cli, tmp_path):
    app = make_app()
    lines = [header("acme"), api_key(), api_key(name=f"ci{SURROGATE}"), memory()]
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", *lines))
    refused(result, "line 3: apiKey.name must be valid Unicode text")
    assert counts(app) == (0, 0)


# -- ids -------------------------------------------------------------------------------


def test_upper_case_ids_are_imported_in_the_apis_lower_case_form(make_app, memsvc_cli, tmp_path):
    app = make_app()
    client = app.test_client()
    secret = f"sk_memsvc_{secrets.token_hex(32)}"
    key = api_key("acme", secret)
    key["apiKey"]["id"] = key["apiKey"]["id"].upper()
    first, second = memory(), memory()
    first["id"], second["id"] = first["id"].upper(), second["id"].upper()
    path = write(tmp_path / "acme.jsonl", header("acme"), key, first, second)
    assert memsvc_cli("import", path).stderr.strip() == "Imported 2 memories and 1 API key."
    auth = {"x-api-key": secret}

    found = data(query(client, "memory.getById", {"id": first["id"]}, headers=auth))
    assert found["id"] == first["id"].lower()
    body = {"id": first["id"], "content": "likes oolong"}
    assert data(mutate(client, "memory.update", body, headers=auth))["content"] == "likes oolong"
    assert len(data(query(client, "memory.history", {"id": first["id"]}, headers=auth))) == 2
    assert data(mutate(client, "memory.delete", {"id": first["id"]}, headers=auth))
    assert data(mutate(client, "memory.delete", {"id": second["id"].lower()}, headers=auth))
    assert counts(app) == (0, 1)
    with app.app_context():
        assert [k.id for k in store().list_keys("acme")] == [key["apiKey"]["id"].lower()]
    # A second run finds them already there, in either case.
    again = memsvc_cli("import", path)
    assert "1 API key already there" in again.stderr, again.output


@pytest.mark.parametrize(
    "lines, message",
    [
        ([memory(id="not-a-uuid")], "line 2: id must be a UUID"),
        ([api_key(id="key-1")], "line 2: apiKey.id must be a UUID"),
        ([api_key(keyId="key_\x1b[2J")], "line 2: apiKey.keyId must be key_ and 16 hex digits"),
        (
            [
                memory(id="0d2b7c56-8f5e-4c8e-9a57-2f0e9b0c1a11"),
                memory(id="0D2B7C56-8F5E-4C8E-9A57-2F0E9B0C1A11"),
            ],
            "line 3: the id 0d2b7c56-8f5e-4c8e-9a57-2f0e9b0c1a11 appears twice",
        ),
    ],  # fmt: skip
    ids=["memory", "key", "key-id", "twice-in-two-cases"],
)
def test_ids_that_are_no_uuid_are_refused(make_app, memsvc_cli, tmp_path, lines, message):
    app = make_app()
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", header("acme"), *lines))
    refused(result, message)
    assert counts(app) == (0, 0)


# -- keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"rateLimit": 100_001}, "apiKey.rateLimit must be a whole number from 0 (no limit)"),
        ({"rateLimit": 10**12}, "apiKey.rateLimit must be a whole number from 0 (no limit)"),
        ({"concurrencyLimit": 10_001}, "apiKey.concurrencyLimit must be a whole number from 0"),
    ],
)
def test_key_limits_beyond_what_keys_set_limits_accepts_are_refused(
    make_app, memsvc_cli, tmp_path, fields, message
):
    app = make_app()
    # 0 is "no limit" for keys set-limits too; these are the largest values it takes.
    within = [
        api_key(rateLimit=0, concurrencyLimit=0),
        api_key(rateLimit=100_000, concurrencyLimit=10_000),
    ]
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", header(), *within, api_key(**fields)))
    refused(result, f"line 4: {message}")
    assert counts(app) == (0, 0)
    assert memsvc_cli("import", write(tmp_path / "y.jsonl", header(), *within)).exit_code == 0
    with app.app_context():
        limits = {(k.rate_limit, k.concurrency_limit) for k in store().list_keys("acme")}
    assert limits == {(0, 0), (100_000, 10_000)}


def test_the_key_cap_counts_the_keys_already_there(make_app, memsvc_cli, cli_context, tmp_path):
    app = make_app()
    cli_context.overrides = {**cli_context.overrides, "MAX_KEYS_PER_TENANT": 3}
    with app.app_context():
        for name in ("one", "two"):
            keys.create(store(), "acme", name, "memsvc")
    revoked = clock.iso(clock.now_ms())
    lines = [header(), api_key(revokedAt=revoked), api_key(), api_key(), memory()]
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", *lines))
    refused(result, "line 4: tenant 'acme' would have 4 active API keys, more than 3")
    assert "MEMSVC_MAX_KEYS_PER_TENANT" in result.stderr
    assert counts(app) == (0, 2)
    # Revoked keys do not count: one more active key fits.
    lines = [header(), api_key(revokedAt=revoked), api_key(revokedAt=revoked), api_key()]
    assert memsvc_cli("import", write(tmp_path / "y.jsonl", *lines)).exit_code == 0
    assert counts(app) == (0, 5)


def test_a_key_whose_key_id_or_secret_another_key_has_is_refused(make_app, memsvc_cli, tmp_path):
    app = make_app()
    with app.app_context():
        mine = keys.create(store(), "acme", "own", "memsvc")
    taken = api_key(keyId=mine.key.key_id)
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", header(), memory(), taken))
    refused(result, "line 3: apiKey.keyId is another API key's already")
    same = api_key(secret=mine.secret)
    result = memsvc_cli("import", write(tmp_path / "y.jsonl", header(), memory(), same))
    refused(result, "line 3: apiKey.secretHash is another API key's already")
    assert mine.secret not in result.output and same["apiKey"]["secretHash"] not in result.output
    twice = api_key()
    again = api_key(secretHash=twice["apiKey"]["secretHash"])
    result = memsvc_cli("import", write(tmp_path / "z.jsonl", header(), twice, again))
    refused(result, "line 3: apiKey.secretHash is also line 2's")
    assert counts(app) == (0, 1)


# -- sizes and other rules ---------------------------------------------------------------

LIMITS = {"MAX_CONTENT_CHARS": 40, "MAX_METADATA_BYTES": 60, "MAX_METADATA_DEPTH": 3}


@pytest.mark.parametrize(
    "line, message",
    [
        (memory(content="x" * 41), "content must be at most 40 characters long"),
        (memory(userId="u" * 257), "userId must be at most 256 characters long"),
        (memory(metadata={"k": "v" * 60}), "metadata must be at most 60 bytes as JSON (it is 68)"),
        (memory(metadata={"a": {"b": {"c": {}}}}), "metadata must not be nested more than 3"),
        (memory(metadata={"n": float("nan")}), "not JSON (NaN is not valid JSON)"),
        (memory(version=2**31), "version must be a whole number from 1 to 2147483647"),
        (memory(createdAt="9999-12-31T23:00:00-05:00"), "createdAt must be within the years"),
        (
            memory(version=2, history=[_history("y" * 41)]),
            "history[0].content must be at most 40 characters long",
        ),
        (
            memory(version=2, history=[_history(metadata={"k": "v" * 60})]),
            "history[0].metadata must be at most 60 bytes as JSON",
        ),
        (
            memory(version=3, history=[_history(), _history()]),
            "history[1].version must be above history[0]'s and below the memory's (3)",
        ),
        (api_key(name="x" * 257), "apiKey.name must be at most 256 characters long"),
        (api_key(name="ci\x1b]0;owned\x07"), "apiKey.name must not contain control characters"),
        (
            api_key(lastUsedAt="9999-12-31T23:00:00-05:00"),
            "apiKey.lastUsedAt must be within the years 0001 to 9999 in UTC",
        ),
    ],
    ids=[
        "content-size", "user-id-size", "metadata-size", "metadata-depth",
        "metadata-nan", "version", "year-10000", "history-size", "history-metadata-size",
        "history-versions", "key-name-size", "key-name-control", "key-year-10000",
    ],
)  # fmt: skip
def test_the_apis_limits_and_rules_apply_to_every_line(
    make_app, memsvc_cli, cli_context, tmp_path, line, message
):
    app = make_app()
    cli_context.overrides = {**cli_context.overrides, **LIMITS}
    lines = [header(), memory(), memory(), line]
    result = memsvc_cli("import", write(tmp_path / "x.jsonl", *lines), "--batch-size", "1")
    refused(result, f"line 4: {message}")
    assert counts(app) == (0, 0)


# -- between the check and the import --------------------------------------------------


def as_lines(*lines: dict[str, t.Any]) -> list[str]:
    return [json.dumps(line) + "\n" for line in lines]


def test_keys_added_after_the_check_are_counted_before_anything_is_written(make_app):
    app = make_app(MAX_KEYS_PER_TENANT=2)
    lines = as_lines(header(), api_key(), memory())
    with app.app_context():
        limits = transfer.Rules.from_settings(app.config, ["acme"])
        checked = transfer.check(store(), lines, limits)
        for name in ("one", "two"):  # while the operator was not looking
            keys.create(store(), "acme", name, "memsvc")
        with pytest.raises(transfer.InvalidImport) as refusal:
            transfer.import_(store(), embedder(), lines, checked, limits)
    assert str(refusal.value) == (
        "line 2: tenant 'acme' would have 3 active API keys, more than 2 "
        "(MEMSVC_MAX_KEYS_PER_TENANT): the database changed since the check; "
        "nothing was imported"
    )
    assert counts(app) == (0, 2)


def test_a_line_changed_after_the_check_stops_the_import_there(make_app):
    """The file is read twice; a line that changed in between is refused all the same."""
    app = make_app()
    checked_lines = [header(), memory(), memory(), memory()]
    changed = [*checked_lines[:3], memory(content=" ")]
    with app.app_context():
        limits = transfer.Rules.from_settings(app.config, ["acme"])
        checked = transfer.check(store(), as_lines(*checked_lines), limits)
        with pytest.raises(transfer.InvalidImport, match="line 4: content must not be empty; the"):
            transfer.import_(store(), embedder(), as_lines(*changed), checked, limits, batch_size=1)
    assert counts(app) == (2, 0)


def test_a_batch_is_written_once_its_lines_reach_the_size_bound(make_app, monkeypatch):
    """Large memories are written in smaller batches: memory use stays bounded."""
    app = make_app()
    checked_lines = [header(), *(memory() for _ in range(5))]
    changed = [*checked_lines[:5], memory(content=" ")]
    lines = as_lines(*checked_lines)
    # Two lines' worth: a batch of 5,000 memories is written every two lines.
    monkeypatch.setattr(transfer, "IMPORT_BATCH_CHARS", len(lines[1]) + len(lines[2]))
    with app.app_context():
        limits = transfer.Rules.from_settings(app.config, ["acme"])
        checked = transfer.check(store(), lines, limits)
        with pytest.raises(transfer.InvalidImport, match="line 6: content must not be empty"):
            transfer.import_(store(), embedder(), as_lines(*changed), checked, limits)
    assert counts(app) == (4, 0)


# -- sizes and vectors ------------------------------------------------------------------


def test_an_oversized_line_is_refused_before_it_is_parsed(make_app, memsvc_cli, tmp_path):
    """A line past the bound is refused as soon as the bound is read: its JSON is never parsed
    (20 MB of small numbers would take gigabytes as Python objects)."""
    app = make_app()
    path = tmp_path / "big.jsonl"
    numbers = "0," * (10 * 1024 * 1024)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header("acme")) + "\n")
        f.write(json.dumps(memory("acme")) + "\n")
        f.write('{"metadata":{"x":[' + numbers + "0]}}\n")
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = memsvc_cli("import", str(path))
        took = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    refused(result, "line 3: longer than 16,777,216 characters")
    assert "--max-line-chars" in result.stderr
    assert peak < 128 * 1024 * 1024, f"{peak / 2**20:.0f} MiB held to refuse the line"
    assert took < 30
    assert counts(app) == (0, 0)
    # The bound is the operator's to move.
    smaller = memsvc_cli("import", str(path), "--max-line-chars", "4096")
    refused(smaller, "line 3: longer than 4,096 characters")


def test_an_all_zero_vector_is_refused_naming_its_line(make_app, memsvc_cli, tmp_path):
    app = make_app()
    zero = base64.b64encode(np.zeros(384, dtype="<f4").tobytes()).decode()
    one = base64.b64encode(np.full(384, 0.05, dtype="<f4").tobytes()).decode()
    lines = [header("acme"), memory("acme", vectors=[one]), memory("acme", vectors=[one, zero])]
    result = memsvc_cli("import", write(tmp_path / "zero.jsonl", *lines))
    refused(result, "line 3: vectors[1] is all zeros: such a memory could never be found")
    assert counts(app) == (0, 0)


def _b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


@pytest.mark.parametrize("windows", [1, 3])
def test_vectors_of_huge_or_tiny_numbers_are_imported_and_nan_is_refused(
    make_app, memsvc_cli, tmp_path, windows
):
    """Import tells a valid vector by its sum of squares, which would overflow (3e38 squared)
    or underflow (1e-45 squared) in float32: such vectors are taken all the same."""
    app = make_app()
    one, huge, tiny = np.full(384, 0.05), np.full(384, 3e38), np.zeros(384)
    tiny[5] = 1e-45
    others = [_b64(one)] * (windows - 1)
    lines = [
        header("acme"),
        memory(vectors=[_b64(huge), *others]),
        memory(vectors=[*others, _b64(tiny)]),
    ]
    result = memsvc_cli("import", write(tmp_path / "extreme.jsonl", *lines))
    assert result.exit_code == 0, (result.output, result.exception)
    assert counts(app) == (2, 0)
    nan = one.copy()
    nan[7] = np.nan
    result = memsvc_cli(
        "import", write(tmp_path / "nan.jsonl", header(), memory(vectors=[*others, _b64(nan)]))
    )
    refused(result, "line 2: vectors must be finite numbers")
    assert counts(app) == (2, 0)
