"""Secrets never leak: not into logs, error answers, other responses, or the database file.

The secrets are API key secrets, identity-provider JWTs (and the secret that
signs local ones) and the embedding provider's API key. A scripted session
uses all of them, right and wrong: good calls, provider failures, bad,
truncated and revoked keys, malformed and forged tokens, credentials sent to
the wrong router. Only ``keys.create``'s answer may hold a secret, its own.
The database keeps only a SHA-256 hash of each API key, and looking a key up
compares digests inside SQLite, never the secret itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import pathlib
import secrets as random_secrets
import typing as t

import pytest
import requests
import responses

from memsvc.errors import Unauthorized
from memsvc.services import keys
from memsvc.tokens import LocalVerifier
from tests.support import figures
from tests.support.fake_provider import FakeProvider
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query
from tests.support.servers import start_server

PROVIDER = "http://provider.test/v1"
ENDPOINT = PROVIDER + "/embeddings"
PROVIDER_KEY = "sk-provider-TEST-SECRET"
JWT_SECRET = "jwt-signing-secret-" + "q" * 30
GOOD = {"data": [{"index": 0, "embedding": [0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8]}]}
LOGGERS = ("", "memsvc", "werkzeug", "flask.app", "urllib3", "requests", "joserfc", "gunicorn")


class Session:
    """Every answer of a scripted session, and the secrets it used."""

    def __init__(self, client: t.Any):
        self.client = client
        self.answers: list[tuple[str, t.Any]] = []
        #: secret -> label of the one answer allowed to show it
        self.secrets: dict[str, str | None] = {PROVIDER_KEY: None, JWT_SECRET: None}

    def keep(self, label: str, resp: t.Any) -> t.Any:
        self.answers.append((label, resp))
        return resp

    def token(self, tenant: str, **kwargs: t.Any) -> str:
        token = LocalVerifier(JWT_SECRET).mint(tenant, **kwargs)
        self.secrets[token] = None
        return token

    def create_key(self, tenant: str, name: str) -> str:
        label = f"keys.create {tenant} {name}"
        resp = self.keep(
            label,
            mutate(
                self.client,
                "keys.create",
                {"name": name},
                headers={"Authorization": f"Bearer {self.token(tenant)}"},
            ),
        )
        created = data(resp)
        self.secrets[created["secret"]] = label
        return created["secret"]


def fragments(secret: str) -> list[str]:
    """The secret, and the parts of it that are secret on their own."""
    parts = [secret]
    if secret.startswith("sk_memsvc_"):
        parts.append(secret.removeprefix("sk_memsvc_"))
    if secret.count(".") == 2:
        parts.append(secret.rsplit(".", 1)[1])  # a JWT's signature
    return parts


def assert_nowhere(text: str, session: Session, where: str, allowed: str | None = None) -> None:
    for secret, owner in session.secrets.items():
        if allowed is not None and owner == allowed:
            continue
        for part in fragments(secret):
            assert part not in text, f"{where} holds a secret ({part[:12]}...): {text[:500]}"


@pytest.fixture
def app(make_app):
    app = make_app(
        EMBEDDER="openai",
        EMBEDDING_URL=PROVIDER,
        EMBEDDING_MODEL="fake",
        EMBEDDING_DIMENSIONS=8,
        EMBEDDING_API_KEY=PROVIDER_KEY,
        JWT_SECRET=JWT_SECRET,
        RATE_LIMIT_PER_MINUTE=0,
        CONCURRENCY_LIMIT=0,
        PROPAGATE_EXCEPTIONS=False,
    )
    app.extensions["memsvc"].embedder.sleep = lambda seconds: None
    return app


def _forged(token: str) -> list[str]:
    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    other = base64.urlsafe_b64encode(json.dumps({**claims, "sub": "tenant-B"}).encode())
    none = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
    return [
        f"{head}.{other.rstrip(b'=').decode()}.{signature}",  # claims changed, old signature
        f"{none}.{body}.",  # alg none
        f"{head}.{body}.{signature[:-2]}AA",  # signature altered
        f"{head}.{body}",  # signature dropped
        token + "x",
        LocalVerifier("another-secret-" + "z" * 30).mint("tenant-A"),
    ]


@pytest.mark.stores("sqlite")  # reads the SQLite file and its statements
def test_no_secret_reaches_a_log_an_error_or_another_response(app, caplog, capsys):
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name or None)
    client = app.test_client()
    session = Session(client)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as provider:
        provider.add(responses.POST, ENDPOINT, json=GOOD)
        key = session.create_key("tenant-A", "main")
        spare = session.create_key("tenant-A", "spare")
        theirs = session.create_key("tenant-B", "theirs")
        token = session.token("tenant-A")
        bearer = {"Authorization": f"Bearer {token}"}
        auth = {"x-api-key": key}

        # Good calls.
        session.keep("keys.list", query(client, "keys.list", headers=bearer))
        added = data(
            session.keep(
                "add",
                mutate(client, "memory.add", {"userId": "u", "content": "hello"}, headers=auth),
            )
        )
        for path, input in [
            ("memory.search", {"userId": "u", "query": "hello", "threshold": 0}),
            ("memory.getAll", {"userId": "u"}),
            ("memory.getById", {"id": added["id"]}),
        ]:
            session.keep(path, query(client, path, input, headers=auth))
        assert provider.calls[0].request.headers["Authorization"] == f"Bearer {PROVIDER_KEY}"

        # The provider failing in every way, including echoing its key back.
        for label, kwargs in [
            ("provider 500", {"status": 500, "body": f"upstream error, key {PROVIDER_KEY}"}),
            (
                "provider 401",
                {
                    "status": 401,
                    "json": {"error": {"message": f"Incorrect API key provided: {PROVIDER_KEY}"}},
                },
            ),
            ("provider 429", {"status": 429, "headers": {"Retry-After": "1"}}),
            ("provider timeout", {"body": requests.exceptions.ReadTimeout(PROVIDER_KEY)}),
            ("provider garbage", {"status": 200, "body": f"<html>{PROVIDER_KEY}</html>"}),
            ("provider 400", {"status": 400, "json": {"error": {"message": "bad input"}}}),
        ]:
            provider.replace(responses.POST, ENDPOINT, **kwargs)
            session.keep(
                label,
                mutate(client, "memory.add", {"userId": "u", "content": label}, headers=auth),
            )
            session.keep(
                label + " search",
                query(client, "memory.search", {"userId": "u", "query": label}, headers=auth),
            )
        provider.replace(responses.POST, ENDPOINT, json=GOOD)

        # Wrong, truncated, altered and revoked API keys; keys sent to the wrong router.
        session.keep(
            "revoke spare",
            mutate(client, "keys.revoke", {"id": _key_id(client, bearer, "spare")}, headers=bearer),
        )
        flipped = key[:-1] + ("0" if key[-1] != "0" else "1")
        for label, value in [
            ("revoked key", spare),
            ("altered key", flipped),
            ("truncated key", key[:-8]),
            ("longer key", key + "00"),
            ("key with spaces", f" {key} "),
            ("bearer in x-api-key", f"Bearer {key}"),
            ("token as api key", token),
            ("other tenant's key", theirs),
        ]:
            headers = {"x-api-key": value}
            session.keep(label, query(client, "memory.getAll", {"userId": "u"}, headers=headers))
            session.keep(
                label + " batch",
                client.get(
                    "/trpc/memory.getAll,memory.getAll",
                    query_string={"batch": "1", "input": json.dumps({"0": {"userId": "u"}})},
                    headers=headers,
                ),
            )
        for label, value in [
            ("api key as bearer", f"Bearer {key}"),
            ("api key raw", key),
            ("basic", "Basic " + base64.b64encode(f"user:{key}".encode()).decode()),
            ("expired token", f"Bearer {session.token('tenant-A', ttl=-3600)}"),
            *[(f"forged token {i}", f"Bearer {bad}") for i, bad in enumerate(_forged(token))],
            ("lone surrogate tenant", "Bearer " + _surrogate_tenant_token(session)),
        ]:
            headers = {"Authorization": value}
            session.keep(label, query(client, "keys.list", headers=headers))
            session.keep(
                label + " create",
                mutate(client, "keys.create", {"name": "x"}, headers=headers),
            )
        session.keep(
            "revoke another tenant's key",
            mutate(
                client,
                "keys.revoke",
                {"id": _key_id(client, bearer, "main")},
                headers={"Authorization": f"Bearer {session.token('tenant-B')}"},
            ),
        )
        session.keep(
            "memory call with a token",
            query(client, "memory.getAll", {"userId": "u"}, headers=bearer),
        )

    for label, resp in session.answers:
        figures.count("secrets", unit="answers scanned")
        text = resp.get_data(as_text=True)
        allowed = label if label.startswith("keys.create ") else None
        assert_nowhere(text, session, f"the answer to {label!r}", allowed)
        assert_nowhere(str(resp.headers), session, f"the headers of {label!r}")
    failures = [label for label, resp in session.answers if resp.status_code >= 400]
    assert len(failures) > 40, "the session did not exercise the failure paths"

    formatter = logging.Formatter()
    for record in caplog.records:
        text = record.getMessage() + repr(record.args)
        if record.exc_info:
            text += formatter.formatException(record.exc_info)
        if record.stack_info:
            text += record.stack_info
        assert_nowhere(text, session, f"log record {record.name}:{record.levelname}")
    assert_nowhere(caplog.text, session, "the captured log")
    out, err = capsys.readouterr()
    assert_nowhere(out + err, session, "stdout/stderr")
    assert any("embedding provider" in r.getMessage() for r in caplog.records), (
        "provider failures were expected to be logged"
    )

    # The files: the database (and its WAL) hold hashes, never a secret.
    app.extensions["memsvc"].backend.disconnect()
    root = pathlib.Path(app.config["DATABASE"]).parent
    blobs = b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())
    for secret in session.secrets:
        for part in fragments(secret):
            assert part.encode() not in blobs, f"a file under {root} holds {part[:12]}..."
    for secret, owner in session.secrets.items():
        if owner is not None:  # an API key secret
            assert hashlib.sha256(secret.encode()).digest() in blobs


def _key_id(client: t.Any, bearer: dict[str, str], name: str) -> str:
    listed = data(query(client, "keys.list", headers=bearer))
    return next(k["id"] for k in listed if k["name"] == name)


def _surrogate_tenant_token(session: Session) -> str:
    """A correctly signed token whose tenant is not valid Unicode (a known 500)."""
    import hmac

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(b'{"alg":"HS256","typ":"JWT"}')
    body = b64(b'{"sub":"acme-\\ud800","iss":"memsvc","exp":9999999999}')
    signature = hmac.new(JWT_SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    token = f"{head}.{body}.{b64(signature)}"
    session.secrets[token] = None
    return token


# -- looking keys up by hash -----------------------------------------------------------------


class NeverCompared(str):
    """A secret that fails the test if anything compares or slices it as text."""

    def _refuse(self, *args: t.Any, **kwargs: t.Any) -> t.NoReturn:
        raise AssertionError("the secret itself was compared")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    startswith = endswith = find = index = __getitem__ = __contains__ = _refuse
    __hash__ = str.__hash__


@pytest.mark.stores("sqlite")  # reads the SQLite file and its statements
def test_a_secret_sharing_a_long_prefix_with_a_real_one_fails_exactly_like_a_random_one(store):
    """verify() hashes the candidate and asks SQLite for that digest, nothing else.

    So how close a guess is to a real secret cannot change what happens: a
    near miss has a digest as unrelated to the real one as any other, and the
    only comparisons (in SQLite's index) are of digests. This test checks the
    behaviour that argument rests on, without measuring time.
    """
    real = keys.create(store, "tenant-A", "real", "memsvc").secret
    hex_part = real.removeprefix("sk_memsvc_")
    last = hex_part[-1]
    near_misses = {
        "last character changed": real[:-1] + ("0" if last != "0" else "1"),
        "first random character changed": "sk_memsvc_"
        + ("0" if hex_part[0] != "0" else "1")
        + hex_part[1:],
        "63 of 64 random characters": real[:-1],
        "one character more": real + "0",
        "upper case": real.upper(),
        "half the random part": real[: len("sk_memsvc_") + 32] + "0" * 32,
    }
    random_guesses = {
        "random secret": "sk_memsvc_" + random_secrets.token_hex(32),
        "random text": "hunter2",
        "another word": "sk_other_" + hex_part,
    }
    lookups: list[bytes] = []
    statements: list[str] = []
    key_by_hash = store.key_by_hash
    store.key_by_hash = lambda digest: lookups.append(digest) or key_by_hash(digest)
    store.conn.set_trace_callback(statements.append)
    try:
        outcomes = {}
        for label, guess in {**near_misses, **random_guesses}.items():
            lookups.clear()
            with pytest.raises(Unauthorized) as refused:
                keys.verify(store, guess)
            outcomes[label] = (type(refused.value), refused.value.message, refused.value.status)
            assert lookups == [hashlib.sha256(guess.encode()).digest()], label
        # The real one passes without ever being compared as text.
        assert keys.verify(store, NeverCompared(real)).tenant == "tenant-A"
    finally:
        store.conn.set_trace_callback(None)
        store.key_by_hash = key_by_hash

    assert set(outcomes.values()) == {(Unauthorized, "Invalid API key", 401)}, outcomes
    guesses = list(near_misses.values()) + list(random_guesses.values()) + [real]
    for statement in statements:
        for guess in guesses:
            assert guess not in statement and guess.removeprefix("sk_memsvc_") not in statement
    (stored,) = store.conn.execute("SELECT secret_hash FROM api_keys").fetchone()
    assert stored == hashlib.sha256(real.encode()).digest()


# -- under gunicorn -------------------------------------------------------------------------


@pytest.mark.e2e
def test_gunicorns_logs_hold_no_secret(tmp_path):
    with FakeProvider(delay=0) as provider:
        server = start_server(tmp_path, MEMSVC_EMBEDDING_API_KEY=PROVIDER_KEY, **provider.settings)
        try:
            key = server.create_key("tenant-A", "logs")
            token = server.token("tenant-A")
            bad = key[:-1] + ("0" if key[-1] != "0" else "1")
            calls = [
                ("POST", "memory.add", {"userId": "u", "content": "x"}, {"x-api-key": key}),
                ("GET", "memory.search", {"userId": "u", "query": "x"}, {"x-api-key": key}),
                ("GET", "memory.getAll", {"userId": "u"}, {"x-api-key": bad}),
                ("GET", "keys.list", None, {"Authorization": f"Bearer {token}"}),
                ("GET", "keys.list", None, {"Authorization": f"Bearer {token}x"}),
                ("POST", "keys.create", {"name": "n"}, {"Authorization": f"Bearer {key}"}),
            ]
            for method, path, input, headers in calls:
                if method == "GET":
                    params = {} if input is None else {"input": json.dumps(input)}
                    requests.get(
                        f"{server.trpc}/{path}", params=params, headers=headers, timeout=30
                    )
                else:
                    requests.post(f"{server.trpc}/{path}", json=input, headers=headers, timeout=30)
        finally:
            server.stop()
        log = server.output()
    assert "memory.add" in log, "the access log was expected to list the calls"
    jwt_secret = server.env["MEMSVC_JWT_SECRET"]
    for secret in (key, key.removeprefix("sk_memsvc_"), bad, token, PROVIDER_KEY, jwt_secret):
        assert secret not in log, f"gunicorn's log holds {secret[:12]}..."
