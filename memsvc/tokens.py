"""Identity-provider tokens (JWTs) for the ``keys`` router: who is the tenant?

Two modes, chosen by settings:

``oidc``
    Tokens signed by an OpenID Connect provider (Keycloak, Auth0, Clerk,
    Google, ...) with an asymmetric key (RS*, PS*, ES*). The signing keys
    come from the provider's JWKS, found through its discovery document
    (``MEMSVC_OIDC_ISSUER``) or given directly (``MEMSVC_JWKS_URL``). They
    are cached, and fetched again when a token names a key the cache does
    not hold (the provider rotated its keys), at most once per
    ``JWKS_MIN_REFRESH_SECONDS``.
``local``
    Tokens signed with a shared secret (HS256, ``MEMSVC_JWT_SECRET``), for
    development and tests; ``memsvc token TENANT`` mints them.

In both, ``exp`` is required, ``nbf``/``iat`` are honoured, ``iss`` and
``aud`` are checked when configured (always in OIDC mode, where
``MEMSVC_OIDC_ISSUER`` is required even with ``MEMSVC_JWKS_URL``), and the tenant id
(``idpUserId``) is the ``sub`` claim (``MEMSVC_JWT_TENANT_CLAIM``). The
token itself is never logged or echoed. :func:`discover` reads and checks a
provider's discovery document, for the keys here and for the console's
sign-in alike.

JOSE is done with joserfc, the JOSE library of the Authlib project, which
Authlib itself now uses and recommends over its deprecated ``authlib.jose``;
Authlib checks the provider's discovery document.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import typing as t
from urllib.parse import urlsplit

import requests
from authlib.oidc.discovery import OpenIDProviderMetadata
from joserfc import jwt
from joserfc.errors import BadSignatureError
from joserfc.errors import ExpiredTokenError
from joserfc.errors import InvalidClaimError
from joserfc.errors import JoseError
from joserfc.errors import MissingClaimError
from joserfc.errors import UnsupportedAlgorithmError
from joserfc.jwk import KeySet
from joserfc.jwk import OctKey

from .errors import ConfigError
from .errors import Unauthorized
from .text import InvalidText
from .text import check_text

log = logging.getLogger(__name__)

ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
)
LOCAL_ALGORITHM = "HS256"
LOCAL_ISSUER = "memsvc"
SECRET_FILE = "jwt-secret"


MAX_TENANT_CHARS = 512


def check_tenant(tenant: str) -> None:
    """A tenant id is printable text: no control characters, at most 512 characters.

    Tenant ids appear in records and on the operator's terminal (``memsvc
    keys list``); ``"acme\\u0000"`` must not be a second "acme".
    """
    check_text(tenant, MAX_TENANT_CHARS, printable=True)


class TokenVerifier(t.Protocol):
    mode: str

    def tenant(self, token: str) -> str:
        """The tenant id the token vouches for, or :class:`Unauthorized`."""
        ...


class _Unreachable(Exception):
    """The identity provider's keys could not be fetched."""


class _ClaimsChecker:
    def __init__(self, *, issuer: str | None, audience: str | None, tenant_claim: str, leeway: int):
        options: dict[str, t.Any] = {"exp": {"essential": True}}
        if issuer:
            options["iss"] = {"essential": True, "value": issuer}
        if audience:
            options["aud"] = {"essential": True, "value": audience}
        self.registry = jwt.JWTClaimsRegistry(leeway=leeway, **options)
        self.tenant_claim = tenant_claim

    def tenant(self, claims: dict[str, t.Any]) -> str:
        try:
            self.registry.validate(claims)
        except ExpiredTokenError:
            raise Unauthorized("Token has expired") from None
        except MissingClaimError as e:
            raise Unauthorized(f"Token lacks required claims: {e.claim}") from None
        except InvalidClaimError as e:
            if e.claim == "nbf":
                raise Unauthorized("Token is not valid yet (nbf)") from None
            raise Unauthorized(f"Token claim not accepted: {e.claim}") from None
        tenant = claims.get(self.tenant_claim)
        if not isinstance(tenant, str) or not tenant.strip():
            raise Unauthorized(f"Token has no '{self.tenant_claim}' claim naming the tenant")
        try:
            check_tenant(tenant)
        except InvalidText:
            raise Unauthorized(
                f"Token's '{self.tenant_claim}' claim is not a usable tenant id"
            ) from None
        return tenant


def _decode(token: str, key: t.Any, algorithms: t.Sequence[str]) -> dict[str, t.Any]:
    try:
        return jwt.decode(token, key, algorithms=list(algorithms)).claims
    except _Unreachable:
        raise Unauthorized(
            "Cannot verify the token now: the identity provider is unreachable"
        ) from None
    except UnsupportedAlgorithmError:
        raise Unauthorized("Token signing algorithm not accepted") from None
    except BadSignatureError:
        raise Unauthorized("Token signature does not verify") from None
    except (JoseError, ValueError, TypeError, KeyError, RecursionError):
        # RecursionError: a payload nested past the JSON parser's depth,
        # correctly signed or not, is as malformed as any other.
        raise Unauthorized("Malformed or unverifiable token") from None


class LocalVerifier:
    """HS256 tokens signed with a shared secret."""

    mode = "local"

    def __init__(
        self,
        secret: str,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        tenant_claim: str = "sub",
        leeway: int = 30,
    ):
        self.key = OctKey.import_key(secret.encode())
        self.issuer = issuer
        self.audience = audience
        self.claims = _ClaimsChecker(
            issuer=issuer, audience=audience, tenant_claim=tenant_claim, leeway=leeway
        )

    def tenant(self, token: str) -> str:
        return self.claims.tenant(_decode(token, self.key, [LOCAL_ALGORITHM]))

    def mint(self, tenant: str, ttl: int = 3600) -> str:
        """A token for ``tenant`` valid for ``ttl`` seconds."""
        now = int(time.time())
        claims: dict[str, t.Any] = {self.claims.tenant_claim: tenant, "iat": now, "exp": now + ttl}
        claims["iss"] = self.issuer or LOCAL_ISSUER
        if self.audience:
            claims["aud"] = self.audience
        return jwt.encode({"alg": LOCAL_ALGORITHM, "typ": "JWT"}, claims, self.key)


class OidcVerifier:
    """Asymmetrically signed tokens checked against a provider's JWKS."""

    mode = "oidc"

    def __init__(
        self,
        *,
        issuer: str,
        jwks_url: str | None,
        audience: str,
        tenant_claim: str = "sub",
        leeway: int = 30,
        cache_seconds: float = 3600,
        min_refresh_seconds: float = 60,
        timeout: float = 5,
    ):
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.claims = _ClaimsChecker(
            issuer=issuer, audience=audience, tenant_claim=tenant_claim, leeway=leeway
        )
        self.cache_seconds = cache_seconds
        self.min_refresh_seconds = min_refresh_seconds
        self.timeout = timeout
        self._keys: KeySet | None = None
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._lock = threading.Lock()
        self._session = requests.Session()

    def tenant(self, token: str) -> str:
        return self.claims.tenant(_decode(token, self._key_for, ASYMMETRIC_ALGORITHMS))

    # -- keys -------------------------------------------------------------------

    def _key_for(self, obj: t.Any) -> t.Any:
        """joserfc's key resolver: the JWKS key the token's header names."""
        headers = obj.headers()
        kid = headers.get("kid")
        keys = self._key_set(refresh=False)
        key = _pick(keys, kid, headers["alg"])
        if key is None:
            # Perhaps the provider rotated its keys since we fetched them.
            keys = self._key_set(refresh=True)
            key = _pick(keys, kid, headers["alg"])
        if key is None:
            raise ValueError("no matching key")
        return key

    def _key_set(self, *, refresh: bool) -> KeySet:
        """The cached JWKS, fetched when missing, old, or asked to refresh.

        Fetches are rate-bounded: at most one per ``min_refresh_seconds``
        (one per 5 s while no keys are held at all), so neither tokens with
        made-up key ids nor a provider outage can make memsvc hammer the
        provider or make every request wait for a time-out.
        """
        with self._lock:
            now = time.monotonic()
            due = self._keys is None or refresh or now - self._fetched_at > self.cache_seconds
            interval = self.min_refresh_seconds if self._keys is not None else 5.0
            if due and now - self._attempted_at >= interval:
                self._attempted_at = now
                try:
                    self._keys = KeySet.import_key_set(self._get_json(self._jwks_url()))
                    self._fetched_at = now
                except _Unreachable:
                    pass  # keep the keys we have, if any
                except (JoseError, ValueError, TypeError, KeyError) as e:
                    log.warning("identity provider: unusable JWKS: %s", type(e).__name__)
            if self._keys is None:
                raise _Unreachable("no keys")
            return self._keys

    def _jwks_url(self) -> str:
        if self.jwks_url is None:
            try:
                found = discover(
                    self.issuer, ("jwks_uri",), session=self._session, timeout=self.timeout
                )
            except DiscoveryFailed as e:
                log.warning("identity provider unreachable or unusable: %s", e)
                raise _Unreachable("discovery") from None
            self.jwks_url = found["jwks_uri"]
        return self.jwks_url

    def _get_json(self, url: str) -> t.Any:
        try:
            resp = self._session.get(url, timeout=self.timeout)
            resp.raise_for_status()
            body = resp.json()
        except (requests.RequestException, ValueError) as e:
            log.warning("identity provider unreachable: GET %s failed: %s", url, type(e).__name__)
            raise _Unreachable(url) from None
        if not isinstance(body, dict):
            log.warning("identity provider: %s did not return a JSON object", url)
            raise _Unreachable(url)
        return body


class DiscoveryFailed(Exception):
    """The provider's discovery document could not be had, or is not acceptable (says why)."""


#: What the discovery document may name, each checked by Authlib when it is there.
_ENDPOINTS = ("jwks_uri", "authorization_endpoint", "token_endpoint")


def discover(
    issuer: str,
    needs: t.Sequence[str],
    *,
    session: requests.Session | None = None,
    timeout: float = 5,
) -> dict[str, str]:
    """The endpoints ``needs`` names, from ``issuer``'s discovery document once it checks out.

    One check for every use (tokens' keys, the console's sign-in): the
    document names this very issuer; the issuer and every endpoint it names
    are https with no fragment, as OpenID Connect Discovery requires (Authlib
    checks them; a provider on this machine may use plain http, for
    development); and each endpoint needed is there.

    :raises DiscoveryFailed: unreachable, not JSON, or not acceptable.
    """
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        resp = (session or requests).get(url, timeout=timeout)
        resp.raise_for_status()
        document = resp.json()
    except (requests.RequestException, ValueError) as e:
        raise DiscoveryFailed(f"GET {url} failed: {type(e).__name__}") from None
    if not isinstance(document, dict):
        raise DiscoveryFailed(f"{url} did not return a JSON object")
    metadata = OpenIDProviderMetadata(document)
    if metadata.get("issuer") != issuer:
        raise DiscoveryFailed(
            f"the discovery document at {url} names issuer {metadata.get('issuer')!r}, "
            "not the configured one"
        )
    missing = [name for name in needs if not isinstance(metadata.get(name), str)]
    if missing:
        raise DiscoveryFailed(f"the discovery document at {url} has no {', '.join(missing)}")
    checks = {
        "jwks_uri": metadata.validate_jwks_uri,
        "authorization_endpoint": metadata.validate_authorization_endpoint,
        "token_endpoint": metadata.validate_token_endpoint,
    }
    try:
        if not _loopback(issuer):
            metadata.validate_issuer()
        for name in _ENDPOINTS:
            value = metadata.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or urlsplit(value).fragment:
                raise ValueError(f'"{name}" is not a URL without fragment')
            if not _loopback(value):
                checks[name]()
    except ValueError as e:
        raise DiscoveryFailed(f"the discovery document at {url} is not acceptable: {e}") from None
    return {name: str(metadata[name]) for name in needs}


def _loopback(url: str) -> bool:
    return urlsplit(url).hostname in ("localhost", "127.0.0.1", "::1")


def _pick(keys: KeySet, kid: str | None, alg: str) -> t.Any:
    for key in keys.keys:
        if kid is not None and key.kid != kid:
            continue
        if key.get("use") not in (None, "sig"):
            continue
        if key.get("alg") not in (None, alg):
            continue
        return key
    return None


def make_verifier(config: t.Mapping[str, t.Any], instance_path: str) -> TokenVerifier | None:
    """The verifier the settings select, or None when none is configured."""
    common = {
        "audience": config["JWT_AUDIENCE"],
        "tenant_claim": config["JWT_TENANT_CLAIM"],
        "leeway": config["JWT_LEEWAY_SECONDS"],
    }
    oidc = config["OIDC_ISSUER"] or config["JWKS_URL"]
    if oidc and config["JWT_SECRET"]:
        raise ConfigError(
            "MEMSVC_JWT_SECRET must not be set together with MEMSVC_OIDC_ISSUER or "
            "MEMSVC_JWKS_URL: choose local tokens or your identity provider's"
        )
    if oidc:
        if not config["OIDC_ISSUER"]:
            # Without it any issuer whose keys the JWKS holds would pass.
            raise ConfigError(
                "MEMSVC_OIDC_ISSUER must be set with MEMSVC_JWKS_URL: memsvc checks that "
                "tokens' iss is your identity provider"
            )
        if not config["JWT_AUDIENCE"]:
            raise ConfigError(
                "MEMSVC_JWT_AUDIENCE must be set when tokens come from an OIDC provider"
            )
        return OidcVerifier(
            issuer=config["OIDC_ISSUER"],
            jwks_url=config["JWKS_URL"],
            cache_seconds=config["JWKS_CACHE_SECONDS"],
            min_refresh_seconds=config["JWKS_MIN_REFRESH_SECONDS"],
            **common,
        )
    secret = config["JWT_SECRET"] or read_secret_file(instance_path)
    if secret is None:
        return None
    if len(secret) < 32:
        raise ConfigError("MEMSVC_JWT_SECRET must be at least 32 characters long")
    return LocalVerifier(secret, issuer=None, **common)


def read_secret_file(instance_path: str) -> str | None:
    try:
        with open(os.path.join(instance_path, SECRET_FILE)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def create_secret_file(instance_path: str) -> str:
    """Create ``instance/jwt-secret`` (owner-only) unless it exists; return its path."""
    path = os.path.join(instance_path, SECRET_FILE)
    os.makedirs(instance_path, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(48) + "\n")
    return path
