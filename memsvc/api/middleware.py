"""Who is calling, and may they: API keys and limits for the memory router,
bearer JWTs for the keys router.

Each middleware here is declared (:func:`.procedures.middleware`) with the
errors it refuses calls with and the credential it checks: an
authenticating one sets ``call.caller`` or refuses the call with ``401
UNAUTHORIZED``. A batch carries one set of headers, so a credential is
verified once per request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import typing as t

from .. import clock
from ..embeddings import Embedder
from ..embeddings.windows import needed
from ..errors import ApiError
from ..errors import BadRequest
from ..errors import TooManyRequests
from ..errors import Unauthorized
from ..limits import Limits
from ..limits import Refused
from ..models import ApiKey
from ..services import keys
from ..store import storage_problem
from .context import record_storage_problem
from .procedures import Call
from .procedures import Credential
from .procedures import middleware

log = logging.getLogger(__name__)

#: An API key in the ``x-api-key`` header: memory and service calls.
API_KEY = Credential(
    "apiKey", {"type": "apiKey", "in": "header", "name": "x-api-key"}, "`x-api-key`"
)
#: An identity provider's JWT naming the tenant: key management.
BEARER = Credential(
    "bearer", {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}, "bearer JWT"
)


@dataclasses.dataclass(frozen=True)
class Caller:
    tenant: str
    #: The API key used, for memory calls; None for token (keys router) calls.
    key: ApiKey | None = None
    #: The key's limits this call was counted against; None if it was not counted.
    counted: Limits | None = None


def _once(call: Call, name: str, verify: t.Callable[[Call], Caller]) -> Caller:
    """Run ``verify`` once per request; later calls get its result or its error."""
    verified = call.exchange.verified
    cached = verified.get(name)
    if cached is None:
        try:
            cached = verify(call)
        except ApiError as e:
            cached = e
        verified[name] = cached
    if isinstance(cached, ApiError):
        raise cached
    return cached


def _verify_api_key(call: Call) -> Caller:
    secret = call.exchange.header("HTTP_X_API_KEY")
    if not secret:
        raise Unauthorized("Missing API key: send it in the x-api-key header")
    key = keys.verify(call.store(), secret)
    return Caller(tenant=key.tenant, key=key)


@middleware(errors=[Unauthorized], credential=API_KEY)
def api_key(call: Call) -> None:
    """Middleware: the call must carry a valid, unrevoked ``x-api-key``.

    Checked for every call, a batch's too: a key revoked while a batch runs
    stops working for the calls after it (one indexed lookup each).
    """
    call.caller = _verify_api_key(call)


@contextlib.contextmanager
def _unless_storage_fails(what: str, *, record: bool = True) -> t.Iterator[None]:
    """Go on when the storage fails (read-only, full), saying ``what`` was not done.

    A database that takes no writes still answers reads: the bookkeeping
    this guards (limits, lastUsedAt) is skipped, logged and, with
    ``record``, reported by /health. Any other error goes through.
    """
    try:
        yield
    except Exception as e:
        problem = storage_problem(e)
        if problem is None:
            raise
        log.warning("%s: %s", what, problem)
        if record:
            record_storage_problem(problem)


def tenant_slot(tenant: str) -> str:
    """The limiter's name for a tenant's calls at once, all its keys together."""
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()
    return "tenant-calls-" + digest[:32]


def _release(call: Call, held: t.Any) -> None:
    """After :func:`limited`: give the call's concurrency slots back, its key's and its tenant's."""
    if held is None:
        return
    token, tenant_token = held
    limiter = call.runtime.limiter
    with _unless_storage_fails("a limit slot was not released (it expires)", record=False):
        limiter.release(call.caller.key.id, token)
        limiter.release(tenant_slot(call.caller.tenant), tenant_token)


@middleware(errors=[TooManyRequests], after=_release)
def limited(call: Call) -> t.Any:
    """Middleware, after the API key: the key's rate and concurrency limits, and its tenant's.

    Every call counts, batched or not: as one here, and a call with a long
    text to embed as more once its input is read (:func:`pay_for_embedding`).
    A tenant's calls at once, all its keys together, are bounded too
    (``MEMSVC_TENANT_CONCURRENCY_LIMIT``): keys are many, threads few.
    A refused call is answered at once with 429 and a Retry-After, and uses
    up nothing.
    """
    rt = call.runtime
    caller = call.caller
    key = caller.key
    limits = keys.limits_of(key, rt.default_limits)
    per_tenant = call.config["TENANT_CONCURRENCY_LIMIT"]
    held = None
    # With PostgreSQL the counters are in the database: one that takes no
    # writes (read-only, full) cannot count. Reads go on, uncounted;
    # writes fail on their own with the storage's 503.
    with _unless_storage_fails("limits not counted"):
        # The tenant's slot first: it records nothing but the slot, which is
        # given back if the key refuses. The key's acquire records the call
        # in its minute, which nothing takes back: a call refused for its
        # tenant after it would have used up one of its key's calls.
        tenant_token = None
        if per_tenant:
            try:
                tenant_token = rt.limiter.acquire(tenant_slot(caller.tenant), Limits(0, per_tenant))
            except Refused as e:
                raise _too_many(
                    f"Too many concurrent requests: at most {per_tenant} at once per tenant, "
                    "all its API keys together",
                    e,
                ) from None
        try:
            token = rt.limiter.acquire(key.id, limits)
        except BaseException as e:
            with contextlib.suppress(Exception):  # it expires if this fails too
                rt.limiter.release(tenant_slot(caller.tenant), tenant_token)
            if not isinstance(e, Refused):
                raise
            raise _too_many(e.message, e) from None
        held = (token, tenant_token)
        call.caller = Caller(caller.tenant, key, limits)
    return held


def _too_many(message: str, refused: Refused) -> TooManyRequests:
    return TooManyRequests(
        message, headers={"Retry-After": str(refused.retry_after)}, reason=refused.reason
    )


def pay_for_embedding(
    call: Call, field: str, text: str, embedder: Embedder, *, query: bool = False
) -> None:
    """Before ``text`` is embedded: refuse it if it is too much work, else charge what it costs.

    ``400`` if it needs more windows than one call may use
    (``MAX_EMBEDDING_WINDOWS``), or counts as more calls than its key may
    make in a minute; ``429`` if its key's minute has too few calls left for
    it. A call counts as one per ``RATE_LIMIT_WINDOWS_PER_CALL`` windows:
    it was counted as one when :func:`limited` admitted it, and the rest is
    charged here. Counting the windows tokenizes; nothing is embedded.
    """
    advice = "search with a shorter query" if query else "store it as several shorter memories"
    _pay_for_windows(call, field, needed(embedder, text, query=query), advice)


def pay_for_embedding_all(
    call: Call, field: str, texts: t.Sequence[str], embedder: Embedder
) -> None:
    """:func:`pay_for_embedding` for the texts of one call (an ingest's messages) together."""
    windows = sum(needed(embedder, text) for text in texts)
    _pay_for_windows(call, field, windows, "send the messages in several calls")


def _pay_for_windows(call: Call, field: str, windows: int, advice: str) -> None:
    config = call.config
    budget = config["MAX_EMBEDDING_WINDOWS"]
    if budget and windows > budget:
        raise BadRequest(
            f"Invalid input: {field}: too long to embed in one call: it needs {windows:,} "
            f"embedding windows, and one call may use {budget:,} (MEMSVC_MAX_EMBEDDING_WINDOWS); "
            + advice
        )
    per_call = config["RATE_LIMIT_WINDOWS_PER_CALL"]
    units = -(-windows // per_call) if per_call else 1
    limits, key = call.caller.counted, call.caller.key
    if units <= 1 or limits is None or key is None or not limits.per_minute:
        return
    cost = f"{windows:,} embedding windows count as {units} calls (one per {per_call} windows)"
    if units > limits.per_minute:
        raise BadRequest(
            f"Invalid input: {field}: its {cost}, more than the {limits.per_minute} calls a "
            f"minute this API key may make; {advice}"
        )
    with _unless_storage_fails("a call's cost not counted"):
        try:
            call.runtime.limiter.charge(key.id, limits, units - 1)
        except Refused as e:
            raise TooManyRequests(
                f"{e.message}; this call's {cost}",
                headers={"Retry-After": str(e.retry_after)},
                reason="cost",
            ) from None


@middleware()
def record_use(call: Call) -> None:
    """Middleware, after authentication and limits: keep the key's lastUsedAt current.

    Best effort: a database that takes no writes (read-only, full) still
    answers reads; the write that failed is logged, and the call goes on.
    """
    key = call.caller.key
    now = clock.now_ms()
    ex = call.exchange
    resolution_ms = ex.config["LAST_USED_RESOLUTION_SECONDS"] * 1000
    # Most calls come within the resolution of the key's last use: nothing
    # to write, and nothing to look up.
    if keys.needs_use_recorded(key, now, resolution_ms) and not ex.key_used:
        ex.key_used = True
        with _unless_storage_fails("lastUsedAt not recorded"):
            keys.record_use(call.store(), key, now, resolution_ms)


def _verify_bearer(call: Call) -> Caller:
    scheme, _, token = (call.exchange.header("HTTP_AUTHORIZATION") or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Missing bearer token")
    verifier = call.runtime.tokens
    if verifier is None:
        raise Unauthorized(
            "Token authentication is not configured on this server "
            "(its operator sets MEMSVC_OIDC_ISSUER or MEMSVC_JWT_SECRET)"
        )
    return Caller(tenant=verifier.tenant(token))


@middleware(errors=[Unauthorized], credential=BEARER)
def bearer_token(call: Call) -> None:
    """Middleware: the call must carry an identity-provider JWT naming the tenant."""
    call.caller = _once(call, "token", _verify_bearer)


@middleware(errors=[TooManyRequests])
def tenant_limited(call: Call) -> None:
    """Middleware, after the token: the keys router's own rate limit, per tenant.

    Keys are cheap to make and each brings its own limits: without this a
    tenant could mint keys by the hundred and multiply its limits.
    """
    rt = call.runtime
    per_minute = call.config["KEYS_RATE_LIMIT_PER_MINUTE"]
    if per_minute:
        tenant_key = "tenant-" + hashlib.sha256(call.caller.tenant.encode("utf-8")).hexdigest()[:32]
        try:
            rt.limiter.acquire(tenant_key, Limits(per_minute, 0))
        except Refused as e:
            raise TooManyRequests(
                e.message.replace("requests per minute", "key operations per minute per tenant"),
                headers={"Retry-After": str(e.retry_after)},
                reason="tenant_keys",
            ) from None
