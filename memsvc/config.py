"""Settings: their defaults, and the check that fails start-up on a bad one.

Settings come, in order of precedence, from the test mapping given to
``create_app``, ``MEMSVC_*`` environment variables, ``instance/config.py``
and the defaults below. Each setting ``X`` is the environment variable
``MEMSVC_X``; values are parsed as JSON where they can be (``1536`` is a
number), else kept as strings.
"""

from __future__ import annotations

import typing as t
from urllib.parse import urlsplit

from .errors import ConfigError
from .limits import MAX_CONCURRENT
from .limits import MAX_PER_MINUTE

DEFAULTS: dict[str, t.Any] = {
    # DATABASE defaults to <instance>/memsvc.sqlite3, set by create_app.
    "DATABASE": None,
    "SQLITE_BUSY_TIMEOUT_MS": 10_000,
    # FULL: a commit is on disk before the caller hears about it, so an
    # acknowledged memory survives power loss, not only a crash.
    "SQLITE_SYNCHRONOUS": "FULL",
    # Reads through a memory map: loading a user's vectors for the search
    # cache is about 3x faster than through read() calls. 0 turns it off.
    "SQLITE_MMAP_MB": 1024,
    "EMBEDDER": "local",
    "LOCAL_MODEL_PATH": None,
    "EMBEDDING_URL": "https://api.openai.com/v1",
    "EMBEDDING_API_KEY": None,
    "EMBEDDING_MODEL": "text-embedding-3-small",
    "EMBEDDING_DIMENSIONS": 1536,
    "EMBEDDING_SEND_DIMENSIONS": None,
    "EMBEDDING_TIMEOUT": 10.0,
    "EMBEDDING_MAX_RETRIES": 2,
    # Calls per worker process waiting on the provider at once; keep it
    # below gunicorn's threads per worker (4) so a slow provider always
    # leaves a thread for everything else.
    "EMBEDDING_MAX_CONCURRENCY": 3,
    "API_KEY_WORD": "memsvc",
    # Per worker process: users' vectors kept in memory for search. 0: none.
    "SEARCH_CACHE_MB": 256,
    # Per API key, on every worker of the box together; 0 turns a limit off.
    "RATE_LIMIT_PER_MINUTE": 100,
    "CONCURRENCY_LIMIT": 10,
    # Where the limiter keeps its shared state (default: /dev/shm, else the
    # instance folder).
    "LIMITS_DIR": None,
    # lastUsedAt is written at most once per key per this many seconds, so
    # that reads do not each become a write.
    "LAST_USED_RESOLUTION_SECONDS": 1,
    # Tokens for the keys router: an OIDC provider, or a local HS256 secret
    # (read from <instance>/jwt-secret when JWT_SECRET is unset).
    "OIDC_ISSUER": None,
    "JWKS_URL": None,
    "JWT_AUDIENCE": None,
    "JWT_SECRET": None,
    "JWT_TENANT_CLAIM": "sub",
    "JWT_LEEWAY_SECONDS": 30,
    "JWKS_CACHE_SECONDS": 3600,
    "JWKS_MIN_REFRESH_SECONDS": 60,
    # Flask's own request body limit; larger bodies get 413.
    "MAX_CONTENT_LENGTH": 1024 * 1024,
    "MAX_CONTENT_CHARS": 65_536,
    "MAX_USER_ID_CHARS": 256,
    "MAX_NAME_CHARS": 256,
    "MAX_METADATA_BYTES": 65_536,
    "MAX_METADATA_DEPTH": 32,
    "MAX_BATCH_SIZE": 100,
}

EMBEDDERS = ("local", "openai")
SYNCHRONOUS = ("NORMAL", "FULL", "EXTRA")


def _positive_int(value: t.Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _non_negative_int(value: t.Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive_number(value: t.Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _word(value: t.Any) -> bool:
    return isinstance(value, str) and value.isascii() and value.isalnum()


def _http_url(value: t.Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


# setting -> (check, what it must be)
_RULES: dict[str, tuple[t.Callable[[t.Any], bool], str]] = {
    "DATABASE": (lambda v: isinstance(v, str) and v != "", "a file path"),
    "SQLITE_BUSY_TIMEOUT_MS": (_non_negative_int, "a whole number of milliseconds"),
    "SQLITE_SYNCHRONOUS": (lambda v: v in SYNCHRONOUS, f"one of {', '.join(SYNCHRONOUS)}"),
    "SQLITE_MMAP_MB": (_non_negative_int, "a whole number of megabytes (0: off)"),
    "EMBEDDER": (lambda v: v in EMBEDDERS, f"one of {', '.join(EMBEDDERS)}"),
    "LOCAL_MODEL_PATH": (lambda v: v is None or isinstance(v, str), "a directory path"),
    "EMBEDDING_URL": (_http_url, "an http(s) URL such as https://api.openai.com/v1"),
    "EMBEDDING_MODEL": (lambda v: isinstance(v, str) and v != "", "a model name"),
    "EMBEDDING_DIMENSIONS": (_positive_int, "a positive whole number"),
    "EMBEDDING_SEND_DIMENSIONS": (lambda v: v is None or isinstance(v, bool), "true or false"),
    "EMBEDDING_TIMEOUT": (_positive_number, "a positive number of seconds"),
    "EMBEDDING_MAX_RETRIES": (_non_negative_int, "a whole number"),
    "EMBEDDING_MAX_CONCURRENCY": (_positive_int, "a positive whole number"),
    "API_KEY_WORD": (_word, "letters and digits only"),
    "SEARCH_CACHE_MB": (_non_negative_int, "a whole number of megabytes (0: no cache)"),
    "RATE_LIMIT_PER_MINUTE": (
        lambda v: _non_negative_int(v) and v <= MAX_PER_MINUTE,
        f"a whole number from 0 (no limit) to {MAX_PER_MINUTE}",
    ),
    "CONCURRENCY_LIMIT": (
        lambda v: _non_negative_int(v) and v <= MAX_CONCURRENT,
        f"a whole number from 0 (no limit) to {MAX_CONCURRENT}",
    ),
    "LIMITS_DIR": (lambda v: v is None or (isinstance(v, str) and v != ""), "a directory path"),
    "LAST_USED_RESOLUTION_SECONDS": (_non_negative_int, "a whole number of seconds"),
    "OIDC_ISSUER": (lambda v: v is None or _http_url(v), "an http(s) URL"),
    "JWKS_URL": (lambda v: v is None or _http_url(v), "an http(s) URL"),
    "JWT_AUDIENCE": (lambda v: v is None or (isinstance(v, str) and v != ""), "a string"),
    "JWT_TENANT_CLAIM": (lambda v: isinstance(v, str) and v != "", "a claim name"),
    "JWT_LEEWAY_SECONDS": (_non_negative_int, "a whole number of seconds"),
    "JWKS_CACHE_SECONDS": (_positive_int, "a positive whole number of seconds"),
    "JWKS_MIN_REFRESH_SECONDS": (_non_negative_int, "a whole number of seconds"),
    "MAX_CONTENT_LENGTH": (_positive_int, "a positive number of bytes"),
    "MAX_CONTENT_CHARS": (_positive_int, "a positive whole number"),
    "MAX_USER_ID_CHARS": (_positive_int, "a positive whole number"),
    "MAX_NAME_CHARS": (_positive_int, "a positive whole number"),
    "MAX_METADATA_BYTES": (_positive_int, "a positive number of bytes"),
    "MAX_METADATA_DEPTH": (_positive_int, "a positive whole number"),
    "MAX_BATCH_SIZE": (_positive_int, "a positive whole number"),
}

# Settings whose values must never be echoed back in an error message.
SECRET_SETTINGS = frozenset({"EMBEDDING_API_KEY", "JWT_SECRET"})


def validate(config: t.MutableMapping[str, t.Any]) -> None:
    """Check every setting, raising :class:`ConfigError` naming the first bad one."""
    # Environment values are JSON-decoded, so a numeric secret arrives as
    # a number; secrets are strings whatever they look like.
    for name in SECRET_SETTINGS:
        if config.get(name) is not None:
            config[name] = str(config[name])
    for name, (check, expected) in _RULES.items():
        value = config.get(name)
        if not check(value):
            shown = "(hidden)" if name in SECRET_SETTINGS else repr(value)
            raise ConfigError(f"MEMSVC_{name} must be {expected}, got {shown}")
    if config["EMBEDDER"] == "openai" and not config.get("EMBEDDING_API_KEY"):
        # Local OpenAI-compatible servers often need no key; only the
        # OpenAI API itself is known to require one.
        if urlsplit(config["EMBEDDING_URL"]).hostname == "api.openai.com":
            raise ConfigError(
                "MEMSVC_EMBEDDING_API_KEY must be set when MEMSVC_EMBEDDER is openai "
                "and MEMSVC_EMBEDDING_URL is the OpenAI API"
            )
