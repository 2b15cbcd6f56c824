"""JWT verification against real signed tokens; JWKS served through responses."""

import base64
import hashlib
import hmac
import json
import time

import pytest
import requests
import responses
from joserfc import jwt
from joserfc.jwk import ECKey
from joserfc.jwk import KeySet
from joserfc.jwk import OctKey
from joserfc.jwk import RSAKey

from memsvc.errors import ConfigError
from memsvc.errors import Unauthorized
from memsvc.tokens import LocalVerifier
from memsvc.tokens import OidcVerifier
from memsvc.tokens import make_verifier

SECRET = "s" * 48
ISSUER = "https://idp.test/realms/acme"
JWKS_URL = "https://idp.test/realms/acme/protocol/openid-connect/certs"
DISCOVERY = ISSUER + "/.well-known/openid-configuration"
AUDIENCE = "memsvc-api"


def claims(**overrides):
    now = int(time.time())
    base = {"sub": "tenant-A", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def unsigned(payload: dict) -> str:
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(payload)}."


# -- local (HS256) mode -----------------------------------------------------------


@pytest.fixture
def local():
    return LocalVerifier(SECRET)


def hs(payload, secret=SECRET, alg="HS256"):
    return jwt.encode({"alg": alg}, payload, OctKey.import_key(secret.encode()), algorithms=[alg])


def test_local_token_names_the_tenant(local):
    assert local.tenant(hs(claims())) == "tenant-A"


def test_minted_tokens_verify(local):
    assert local.tenant(local.mint("tenant-Z", ttl=60)) == "tenant-Z"


def test_minted_tokens_expire(local):
    token = local.mint("tenant-Z", ttl=1)
    verifier = LocalVerifier(SECRET, leeway=0)
    time.sleep(2.1)
    with pytest.raises(Unauthorized, match="expired"):
        verifier.tenant(token)


@pytest.mark.parametrize(
    "token, message",
    [
        (lambda: hs(claims(exp=int(time.time()) - 3600)), "expired"),
        (lambda: hs(claims(nbf=int(time.time()) + 3600)), "not valid yet"),
        (lambda: hs(claims(exp=None)), "lacks required claims: exp"),
        (lambda: hs(claims(sub=None)), "no 'sub' claim"),
        (lambda: hs(claims(sub="")), "no 'sub' claim"),
        (lambda: hs(claims(sub=42)), "not accepted: sub"),
        (lambda: hs(claims(), secret="x" * 48), "signature does not verify"),
        (lambda: hs(claims(), alg="HS384"), "algorithm not accepted"),
        (lambda: unsigned(claims()), "not accepted|Malformed"),
        (lambda: "not-a-token", "Malformed"),
        (lambda: "a.b.c", "Malformed"),
        (lambda: hs(claims()) + "x", "signature|Malformed"),
    ],
)
def test_local_mode_rejects(local, token, message):
    with pytest.raises(Unauthorized, match=message):
        local.tenant(token())


def test_local_mode_checks_audience_when_configured():
    verifier = LocalVerifier(SECRET, audience=AUDIENCE)
    assert verifier.tenant(hs(claims())) == "tenant-A"
    with pytest.raises(Unauthorized, match="aud"):
        verifier.tenant(hs(claims(aud="someone-else")))
    with pytest.raises(Unauthorized, match="aud"):
        verifier.tenant(hs(claims(aud=None)))


def test_tenant_claim_is_configurable():
    verifier = LocalVerifier(SECRET, tenant_claim="org_id")
    assert verifier.tenant(hs(claims(org_id="org-9"))) == "org-9"
    with pytest.raises(Unauthorized, match="no 'org_id' claim"):
        verifier.tenant(hs(claims()))


# -- OIDC mode ----------------------------------------------------------------------


@pytest.fixture
def rsa():
    return RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "use": "sig"})


@pytest.fixture
def ec():
    return ECKey.generate_key("P-256", parameters={"kid": "ec-1"})


def jwks(*keys):
    return KeySet(list(keys)).as_dict(private=False)


def signed(key, payload, alg, kid=None):
    header = {"alg": alg, "kid": kid if kid is not None else key.kid}
    return jwt.encode(header, payload, key, algorithms=[alg])


@pytest.fixture
def idp(rsa, ec):
    """A provider publishing a discovery document and a JWKS."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.get(DISCOVERY, json={"issuer": ISSUER, "jwks_uri": JWKS_URL})
        mock.get(JWKS_URL, json=jwks(rsa, ec))
        yield mock


@pytest.fixture
def oidc():
    return OidcVerifier(issuer=ISSUER, jwks_url=None, audience=AUDIENCE)


def jwks_fetches(mock):
    return sum(1 for c in mock.calls if c.request.url == JWKS_URL)


def test_rs256_and_es256_tokens_verify(idp, oidc, rsa, ec):
    assert oidc.tenant(signed(rsa, claims(), "RS256")) == "tenant-A"
    assert oidc.tenant(signed(ec, claims(sub="tenant-B"), "ES256")) == "tenant-B"
    assert jwks_fetches(idp) == 1  # cached


@pytest.mark.parametrize(
    "payload, message",
    [
        # Made when the test runs, not when it is collected (a long run would expire them).
        (lambda: claims(exp=int(time.time()) - 3600), "expired"),
        (lambda: claims(nbf=int(time.time()) + 3600), "not valid yet"),
        (lambda: claims(iss="https://evil.test"), "iss"),
        (lambda: claims(iss=None), "iss"),
        (lambda: claims(aud="other-api"), "aud"),
        (lambda: claims(aud=None), "aud"),
        (lambda: claims(exp=None), "exp"),
    ],
)
def test_oidc_mode_rejects_bad_claims(idp, oidc, rsa, payload, message):
    with pytest.raises(Unauthorized, match=message):
        oidc.tenant(signed(rsa, payload(), "RS256"))


def test_audience_may_be_one_of_several(idp, oidc, rsa):
    assert oidc.tenant(signed(rsa, claims(aud=["other", AUDIENCE]), "RS256")) == "tenant-A"


def test_a_key_not_in_the_jwks_is_refused(idp, oidc):
    stranger = RSAKey.generate_key(2048, parameters={"kid": "rsa-1"})
    with pytest.raises(Unauthorized, match="signature does not verify"):
        oidc.tenant(signed(stranger, claims(), "RS256"))


def test_hs256_token_is_refused_in_oidc_mode(idp, oidc):
    with pytest.raises(Unauthorized, match="algorithm not accepted"):
        oidc.tenant(hs(claims()))


def test_alg_none_is_refused_in_oidc_mode(idp, oidc):
    with pytest.raises(Unauthorized):
        oidc.tenant(unsigned(claims()))


def test_rs256_to_hs256_confusion_is_refused(idp, oidc, rsa):
    # The attacker signs with HMAC, using the provider's public key as the secret.
    # (joserfc will not even build such a key, so the forgery is made by hand.)
    public_pem = rsa.as_pem(private=False)
    signing_input = f"{b64({'alg': 'HS256', 'kid': 'rsa-1'})}.{b64(claims())}"
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    forged = signing_input + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    with pytest.raises(Unauthorized, match="algorithm not accepted"):
        oidc.tenant(forged)


def test_rotation_refetches_the_jwks_once(idp, oidc, rsa):
    assert oidc.tenant(signed(rsa, claims(), "RS256")) == "tenant-A"
    new = RSAKey.generate_key(2048, parameters={"kid": "rsa-2"})
    idp.replace(responses.GET, JWKS_URL, json=jwks(new))
    oidc.min_refresh_seconds = 0
    assert oidc.tenant(signed(new, claims(sub="rotated"), "RS256")) == "rotated"
    assert jwks_fetches(idp) == 2


def test_unknown_key_ids_refetch_at_a_bounded_rate(idp, oidc, rsa):
    oidc.tenant(signed(rsa, claims(), "RS256"))
    for i in range(20):
        with pytest.raises(Unauthorized):
            oidc.tenant(signed(rsa, claims(), "RS256", kid=f"made-up-{i}"))
    # One fetch at start; made-up key ids cannot trigger another within
    # min_refresh_seconds (60 by default).
    assert jwks_fetches(idp) == 1


def test_unreachable_jwks_is_401_and_logged(oidc, rsa, caplog):
    with responses.RequestsMock() as mock:
        mock.get(DISCOVERY, json={"issuer": ISSUER, "jwks_uri": JWKS_URL})
        mock.get(JWKS_URL, body=requests.exceptions.ConnectionError("down"))
        token = signed(rsa, claims(), "RS256")
        with pytest.raises(Unauthorized, match="identity provider is unreachable"):
            oidc.tenant(token)
    assert "identity provider unreachable" in caplog.text
    assert token not in caplog.text


def test_unreachable_provider_is_not_asked_again_at_once(oidc, rsa):
    with responses.RequestsMock() as mock:
        mock.get(DISCOVERY, status=503)
        for _ in range(5):
            with pytest.raises(Unauthorized, match="unreachable"):
                oidc.tenant(signed(rsa, claims(), "RS256"))
        assert len(mock.calls) == 1


def test_cached_keys_keep_serving_while_the_provider_is_down(idp, oidc, rsa):
    oidc.tenant(signed(rsa, claims(), "RS256"))
    idp.replace(responses.GET, JWKS_URL, body=requests.exceptions.ConnectionError("down"))
    oidc.cache_seconds = 0  # the cache is stale: memsvc tries, fails, keeps the old keys
    assert oidc.tenant(signed(rsa, claims(), "RS256")) == "tenant-A"


def test_discovery_naming_another_issuer_is_refused(rsa):
    with responses.RequestsMock() as mock:
        mock.get(DISCOVERY, json={"issuer": "https://evil.test", "jwks_uri": JWKS_URL})
        verifier = OidcVerifier(issuer=ISSUER, jwks_url=None, audience=AUDIENCE)
        with pytest.raises(Unauthorized, match="unreachable"):
            verifier.tenant(signed(rsa, claims(), "RS256"))


def test_a_jwks_url_needs_no_discovery_but_the_issuer_is_still_checked(rsa):
    with responses.RequestsMock() as mock:
        mock.get(JWKS_URL, json=jwks(rsa))
        verifier = OidcVerifier(issuer=ISSUER, jwks_url=JWKS_URL, audience=AUDIENCE)
        assert verifier.tenant(signed(rsa, claims(), "RS256")) == "tenant-A"
        for foreign in ("https://evil.example", "anyone", ISSUER + "/other"):
            with pytest.raises(Unauthorized, match="iss"):
                verifier.tenant(signed(rsa, claims(iss=foreign), "RS256"))
        assert [c.request.url for c in mock.calls] == [JWKS_URL]


# -- choosing the mode ------------------------------------------------------------


def settings(**overrides):
    base = {
        "OIDC_ISSUER": None,
        "JWKS_URL": None,
        "JWT_SECRET": None,
        "JWT_AUDIENCE": None,
        "JWT_TENANT_CLAIM": "sub",
        "JWT_LEEWAY_SECONDS": 30,
        "JWKS_CACHE_SECONDS": 3600,
        "JWKS_MIN_REFRESH_SECONDS": 60,
    }
    base.update(overrides)
    return base


def test_mode_selection(tmp_path):
    assert make_verifier(settings(), str(tmp_path)) is None
    assert make_verifier(settings(JWT_SECRET=SECRET), str(tmp_path)).mode == "local"
    oidc = make_verifier(settings(OIDC_ISSUER=ISSUER, JWT_AUDIENCE="a"), str(tmp_path))
    assert oidc.mode == "oidc"
    (tmp_path / "jwt-secret").write_text(SECRET + "\n")
    assert make_verifier(settings(), str(tmp_path)).mode == "local"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"OIDC_ISSUER": ISSUER}, "MEMSVC_JWT_AUDIENCE must be set"),
        ({"OIDC_ISSUER": ISSUER, "JWT_AUDIENCE": "a", "JWT_SECRET": SECRET}, "not be set together"),
        ({"JWT_SECRET": "short"}, "at least 32 characters"),
        ({"JWKS_URL": JWKS_URL, "JWT_AUDIENCE": "a"}, "MEMSVC_OIDC_ISSUER must be set"),
    ],
)
def test_bad_token_settings_fail_start_up(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_verifier(settings(**overrides), str(tmp_path))
