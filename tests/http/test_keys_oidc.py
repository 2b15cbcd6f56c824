"""The keys router with tokens from an OIDC provider (its endpoints faked with responses)."""

import time

import pytest
import responses
from joserfc import jwt
from joserfc.jwk import KeySet
from joserfc.jwk import OctKey
from joserfc.jwk import RSAKey

from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

ISSUER = "https://login.example.test/"
JWKS_URL = "https://login.example.test/.well-known/jwks.json"


@pytest.fixture
def signing_key():
    return RSAKey.generate_key(2048, parameters={"kid": "k1"})


@pytest.fixture
def client(make_app, signing_key):
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.get(
            ISSUER + ".well-known/openid-configuration",
            json={"issuer": ISSUER, "jwks_uri": JWKS_URL},
        )
        mock.get(JWKS_URL, json=KeySet([signing_key]).as_dict(private=False))
        app = make_app(OIDC_ISSUER=ISSUER, JWT_AUDIENCE="https://memsvc.example.test")
        yield app.test_client()


def token(key, alg="RS256", **claims):
    now = int(time.time())
    payload = {
        "sub": "auth0|tenant-42",
        "iss": ISSUER,
        "aud": "https://memsvc.example.test",
        "iat": now,
        "exp": now + 600,
        **claims,
    }
    return jwt.encode({"alg": alg, "kid": "k1"}, payload, key, algorithms=[alg])


def test_provider_tokens_manage_keys(client, signing_key):
    headers = {"Authorization": f"Bearer {token(signing_key)}"}
    created = data(mutate(client, "keys.create", {"name": "ci"}, headers=headers))
    assert created["idpUserId"] == "auth0|tenant-42"
    assert [k["id"] for k in data(query(client, "keys.list", headers=headers))] == [created["id"]]


def test_an_hs256_token_is_refused_by_an_oidc_server(client):
    forged = token(OctKey.import_key(b"x" * 40), alg="HS256")
    resp = query(client, "keys.list", headers={"Authorization": f"Bearer {forged}"})
    assert_error(resp, 401, "UNAUTHORIZED", "keys.list")


def test_a_token_for_another_audience_is_refused(client, signing_key):
    other = token(signing_key, aud="https://other-api.example.test")
    resp = query(client, "keys.list", headers={"Authorization": f"Bearer {other}"})
    assert_error(resp, 401, "UNAUTHORIZED", "keys.list")
