"""Property-based fuzzing of the tRPC wire, through Flask's test client.

Whatever arrives (any JSON, wrong types, missing and extra fields, broken
bytes and percent-encoding, odd batches, huge or hostile strings, forged
credentials), memsvc answers with its JSON error envelope and a 4xx status,
or with a success where the input is valid: never a 5xx, never a body that
is not JSON. Where the request is well-formed, an oracle written from the
README's rules predicts the exact status, and successes must give back what
was sent.

Apps here have no rate or concurrency limits, embed with a hash (same model
id and size as the bundled model, so the database check passes) and answer
unexpected exceptions the way production does (a 500, not a raised error),
so that a crash shows as the response a caller would get.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import io
import json
import math
import re
import time
import typing as t
import unicodedata
import uuid
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder
from werkzeug.test import run_wsgi_app

from memsvc.tokens import LocalVerifier
from tests.support import figures
from tests.support.helpers import HashEmbedder
from tests.support.helpers import assert_error_item

JWT_SECRET = "x" * 40
BUNDLED_MODEL = "local:all-MiniLM-L6-v2"
QUERIES = ("memory.search", "memory.getAll", "memory.getById", "keys.list")
MUTATIONS = ("memory.add", "memory.delete", "keys.create", "keys.revoke")
PROCEDURES = QUERIES + MUTATIONS
FIELDS = {
    "memory.add": ("userId", "content", "metadata"),
    "memory.search": ("userId", "query", "limit", "threshold"),
    "memory.getAll": ("userId", "limit"),
    "memory.getById": ("id",),
    "memory.delete": ("id",),
    "keys.list": (),
    "keys.create": ("name",),
    "keys.revoke": ("id",),
}
# The only statuses a client's mistake may earn (no 5xx among them).
CLIENT_ERRORS = {
    "BAD_REQUEST": 400,
    "UNAUTHORIZED": 401,
    "NOT_FOUND": 404,
    "METHOD_NOT_SUPPORTED": 405,
    "PAYLOAD_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}
UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
MAX_USER_ID, MAX_CONTENT, MAX_NAME = 256, 65_536, 256
MAX_METADATA_BYTES, MAX_METADATA_DEPTH = 65_536, 32
MIB = 1024 * 1024

FUZZ = settings(
    max_examples=60 * figures.SCALE,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)

HOSTILE = [
    "'; DROP TABLE memories; --",
    "' OR '1'='1",
    '" OR 1=1 --',
    "1; DELETE FROM api_keys",
    "%' UNION SELECT secret_hash FROM api_keys --",
    "x' AND user_id != 'x",
    "../../../../etc/passwd",
    "..\\..\\..\\windows\\win.ini",
    "/dev/zero",
    "file:///etc/shadow",
    "%s%s%s%n%x",
    "{0.__class__.__mro__}",
    "{{7*7}}",
    "${jndi:ldap://127.0.0.1/a}",
    "$(id)",
    "`id`",
    "<script>alert(1)</script>",
    "\r\nSet-Cookie: x=y",
    "memory.add,memory.delete",
    "?batch=1&input=",
    "%00%ff%",
    "\\u0000",
    "NULL",
    "null",
    "undefined",
    "NaN",
    "Infinity",
    "__proto__",
    "constructor",
    "rowid",
    "k = 4096",
    "\u202eevil",
    "\ufeff",
    "a\u0301\u0301\u0301",
    "\U0001f600" * 3,
]


# -- strategies --------------------------------------------------------------------------


def _with_surrogate() -> st.SearchStrategy[str]:
    return st.builds(
        lambda a, s, b: a + s + b,
        st.text(max_size=4),
        st.sampled_from(["\ud800", "\udfff", "\udbff\udbff"]),
        st.text(max_size=4),
    )


TEXTS = st.one_of(
    st.text(max_size=24),
    st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=12),
    st.sampled_from(HOSTILE),
    _with_surrogate(),
    st.text(max_size=6).map(lambda s: s + "\x00" + s),
    st.sampled_from(["", " ", "\t\n", "\u3000", "\u00a0", "\x1f"]),
    st.integers(MAX_USER_ID - 2, MAX_USER_ID + 2).map(lambda n: "u" * n),
    st.sampled_from([MAX_CONTENT, MAX_CONTENT + 1]).map(lambda n: "c" * n),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**53, max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXTS,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(TEXTS, kids, max_size=4),
    max_leaves=10,
)


def _nested(depth: int) -> dict[str, t.Any]:
    """A JSON object nested ``depth`` containers deep (objects and arrays in turn)."""
    value: t.Any = {"leaf": "bottom"}
    for i in range(depth - 1):
        value = {f"level{i}": value} if i % 2 or i == depth - 2 else [value]
    return value


METADATA = st.one_of(
    st.dictionaries(TEXTS, JSON_VALUES, max_size=5),
    st.integers(MAX_METADATA_DEPTH - 2, MAX_METADATA_DEPTH + 2).map(_nested),
    st.sampled_from([200, 400]).map(_nested),
    st.integers(MAX_METADATA_BYTES - 12, MAX_METADATA_BYTES - 6).map(lambda n: {"b": "x" * n}),
    JSON_VALUES,
)
LIMITS = st.one_of(
    st.integers(-3, 1003),
    st.sampled_from([10.0, 100.0, 1000.0, 1.5, -0.0, 1e300, True, False, "10", None, 2**63]),
    st.floats(allow_nan=False, allow_infinity=False),
    JSON_VALUES,
)
THRESHOLDS = st.one_of(
    st.floats(-0.5, 1.5, allow_nan=False),
    st.sampled_from([0, 1, 0.7, -0.0, 1e-320, True, "0.5", None, 10**400]),
    JSON_VALUES,
)


@dataclasses.dataclass(frozen=True)
class KnownId:
    """Stands for the id of something that exists (or did), picked when the call is made.

    Strategies must not depend on the app's state (hypothesis replays them), so
    they draw an index, and :meth:`Wire.resolve` turns it into an id.
    """

    index: int
    upper: bool


KNOWN_IDS = st.builds(KnownId, st.integers(0, 1000), st.booleans())
IDS = st.one_of(
    KNOWN_IDS,
    st.uuids().map(str),
    st.uuids().map(lambda u: u.hex),
    st.uuids().map(lambda u: "{" + str(u) + "}"),
    st.uuids().map(lambda u: " " + str(u)),
    TEXTS,
    JSON_VALUES,
)


def field_values(field: str) -> st.SearchStrategy[t.Any]:
    if field in ("userId", "content", "query", "name"):
        return st.one_of(TEXTS, TEXTS, JSON_VALUES)
    if field == "metadata":
        return METADATA
    if field == "limit":
        return LIMITS
    if field == "threshold":
        return THRESHOLDS
    return IDS


REQUIRED = {"userId", "content", "query", "id", "name"}
VALID_TEXTS = st.one_of(st.text(min_size=1, max_size=24), st.sampled_from(HOSTILE)).filter(
    lambda s: text_ok(s, MAX_USER_ID)
)
CLEAN_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=8,
)


def valid_values(field: str) -> st.SearchStrategy[t.Any]:
    if field == "userId":
        return st.one_of(st.sampled_from(["u", "alice", "bob"]), VALID_TEXTS)
    if field in ("content", "query", "name"):
        return VALID_TEXTS
    if field == "metadata":
        return st.dictionaries(st.text(max_size=8), CLEAN_JSON, max_size=4)
    if field == "limit":
        return st.one_of(st.integers(1, 100), st.sampled_from([1.0, 50.0]))
    if field == "threshold":
        return st.one_of(st.floats(0, 1), st.sampled_from([0, 1, 0.0]))
    return st.one_of(KNOWN_IDS, st.uuids().map(str))


def input_objects(proc: str) -> st.SearchStrategy[dict[str, t.Any]]:
    """An input object for ``proc``: a valid one, one with a field spoilt or dropped, or
    any of its fields with any values; each with unknown fields, or not."""
    fields = FIELDS[proc]
    valid = st.fixed_dictionaries(
        {f: valid_values(f) for f in fields if f in REQUIRED},
        optional={f: valid_values(f) for f in fields if f not in REQUIRED},
    )
    choices = [valid]
    if fields:
        spoilt = st.one_of(*[st.tuples(st.just(f), field_values(f)) for f in fields])
        choices.append(
            st.builds(lambda base, change: {**base, change[0]: change[1]}, valid, spoilt)
        )
        choices.append(
            st.builds(
                lambda base, f: {k: v for k, v in base.items() if k != f},
                valid,
                st.sampled_from(fields),
            )
        )
    choices.append(
        st.fixed_dictionaries({}, optional={field: field_values(field) for field in fields})
    )
    extra = st.dictionaries(
        st.sampled_from(["color", "tenant", "idpUserId", "__proto__", "userid", "Content", ""]),
        JSON_VALUES,
        max_size=2,
    )
    return st.builds(lambda extra, own: {**extra, **own}, extra, st.one_of(*choices))


INPUTS = {proc: input_objects(proc) for proc in PROCEDURES}


# -- the README's rules, as an oracle ----------------------------------------------------


def _unicode(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_ok(value: t.Any, limit: int, printable: bool = False) -> bool:
    return (
        isinstance(value, str)
        and bool(value.strip())
        and len(value) <= limit
        and "\x00" not in value
        and _unicode(value)
        and not (printable and any(unicodedata.category(c) in UNPRINTABLE for c in value))
    )


#: Unicode categories a key name may not hold: it reaches operators' terminals.
UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp")


def whole_in(value: t.Any, lo: int, hi: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        if not value.is_integer():
            return False
        value = int(value)
    return isinstance(value, int) and lo <= value <= hi


def number_in(value: t.Any, lo: float, hi: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        value = float(value)
    except OverflowError:
        return False
    return math.isfinite(value) and lo <= value <= hi


def _depth_and_text(value: t.Any) -> tuple[int, bool]:
    """Deepest container nesting, and whether every string is Unicode text."""
    deepest, ok, stack = 0, True, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            ok = ok and _unicode(node)
        elif isinstance(node, dict):
            deepest = max(deepest, depth)
            for key, item in node.items():
                ok = ok and _unicode(key)
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in node)
    return deepest, ok


def metadata_ok(value: t.Any) -> bool:
    if not isinstance(value, dict):
        return False
    depth, ok = _depth_and_text(value)
    if depth > MAX_METADATA_DEPTH or not ok:
        return False
    return len(compact(value, ensure_ascii=False).encode()) <= MAX_METADATA_BYTES


def uuid_ok(value: t.Any) -> bool:
    return isinstance(value, str) and UUID.fullmatch(value) is not None


# -- the harness ---------------------------------------------------------------------------


def compact(value: t.Any, ensure_ascii: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, separators=(",", ":"))


class Wire:
    """A fuzzing app, its callers' credentials, and what the test knows of its state.

    The caller is tenant A; tenant B's memories and keys exist so that a
    leak across tenants would show.
    """

    def __init__(self, app: t.Any):
        self.app = app
        self.client = app.test_client()
        verifier = LocalVerifier(JWT_SECRET)
        self.tokens = {tenant: verifier.mint(tenant) for tenant in ("tenant-A", "tenant-B")}
        #: Every key record's tenant, by id; each tenant's working key.
        self.key_tenants: dict[str, str] = {}
        self.key_ids: dict[str, str] = {}
        self.secrets: dict[str, str] = {}
        for tenant in self.tokens:
            created = self.ok(self.call("keys.create", {"name": "fuzz"}, tenant=tenant))
            self.key_tenants[created["id"]] = tenant
            self.key_ids[tenant] = created["id"]
            self.secrets[tenant] = created["secret"]
        #: Live memories by id, as memsvc returned them.
        self.memories: dict[str, dict[str, t.Any]] = {}
        for tenant in self.tokens:
            for i in range(3):
                added = self.ok(
                    self.call("memory.add", {"userId": "u", "content": f"seed {i}"}, tenant=tenant)
                )
                self.memories[added["id"]] = added

    def resolve(self, fields: dict[str, t.Any]) -> dict[str, t.Any]:
        """The input with each :class:`KnownId` replaced by a memory's or key's id."""
        known = sorted(self.memories) + sorted(self.key_tenants)
        out = {}
        for name, value in fields.items():
            if isinstance(value, KnownId):
                picked = known[value.index % len(known)]
                value = picked.upper() if value.upper else picked
            out[name] = value
        return out

    def headers(self, proc: str, tenant: str | None) -> dict[str, str]:
        if tenant is None:
            return {}
        if proc.startswith("keys."):
            return {"Authorization": f"Bearer {self.tokens[tenant]}"}
        return {"x-api-key": self.secrets[tenant]}

    def call(
        self,
        proc: str,
        input: t.Any,
        *,
        tenant: str | None = "tenant-A",
        ensure_ascii: bool = True,
    ) -> t.Any:
        """One call the way @trpc/client's httpLink sends it (raw UTF-8 or \\u escapes)."""
        headers = self.headers(proc, tenant)
        method = "GET" if proc in QUERIES else "POST"
        try:
            text = compact(input, ensure_ascii)
            text.encode()
        except UnicodeEncodeError:
            text = compact(input)
        if method == "GET":
            return self.client.get(f"/trpc/{proc}", query_string={"input": text}, headers=headers)
        return self.client.open(
            f"/trpc/{proc}",
            method=method,
            data=text.encode(),
            headers={**headers, "Content-Type": "application/json"},
        )

    def ok(self, resp: t.Any) -> t.Any:
        body = check_envelope(resp)
        assert resp.status_code == 200, body
        return body["result"]["data"]

    def expect(self, proc: str, fields: dict[str, t.Any]) -> int:
        """The status the README gives this (well-formed, authenticated) call of tenant A."""
        if proc == "keys.list":
            return 200
        if proc == "keys.create":
            return 200 if text_ok(fields.get("name"), MAX_NAME, printable=True) else 400
        if proc in ("memory.getById", "memory.delete", "keys.revoke"):
            if not uuid_ok(fields.get("id")):
                return 400
            found = fields["id"].lower()
            if proc == "keys.revoke":
                return {"tenant-A": 200, "tenant-B": 401}.get(self.key_tenants.get(found, ""), 404)
            memory = self.memories.get(found)
            return 200 if memory is not None and memory["idpUserId"] == "tenant-A" else 404
        valid = text_ok(fields.get("userId"), MAX_USER_ID)
        if proc == "memory.add":
            valid = valid and text_ok(fields.get("content"), MAX_CONTENT)
            valid = valid and ("metadata" not in fields or metadata_ok(fields["metadata"]))
        elif proc == "memory.search":
            valid = valid and text_ok(fields.get("query"), MAX_CONTENT)
            valid = valid and ("limit" not in fields or whole_in(fields["limit"], 1, 100))
            valid = valid and ("threshold" not in fields or number_in(fields["threshold"], 0, 1))
        else:
            valid = valid and ("limit" not in fields or whole_in(fields["limit"], 1, 1000))
        return 200 if valid else 400

    def learn(self, proc: str, fields: dict[str, t.Any], result: t.Any) -> None:
        """Check a success against what was sent, and remember what it changed."""
        if proc == "memory.add":
            assert result["content"] == fields["content"]
            assert result["userId"] == fields["userId"]
            assert result["idpUserId"] == "tenant-A"
            assert result["metadata"] == fields.get("metadata", {})
            self.memories[result["id"]] = result
            again = self.ok(self.call("memory.getById", {"id": result["id"]}))
            assert again == result
        elif proc == "memory.delete":
            assert result == {"success": True}
            del self.memories[fields["id"].lower()]
        elif proc == "memory.getById":
            assert result == self.memories[fields["id"].lower()]
        elif proc in ("memory.getAll", "memory.search"):
            limit = int(fields.get("limit", 10 if proc == "memory.search" else 100))
            assert len(result) <= limit
            for item in result:
                assert item["idpUserId"] == "tenant-A" and item["userId"] == fields["userId"]
                assert self.memories[item["id"]]["content"] == item["content"]
            mine = [
                m
                for m in self.memories.values()
                if m["idpUserId"] == "tenant-A" and m["userId"] == fields["userId"]
            ]
            if proc == "memory.search":
                sims = [item["similarity"] for item in result]
                assert sims == sorted(sims, reverse=True)
                threshold = float(fields.get("threshold", 0.7))
                assert all(threshold <= s <= 1 for s in sims)
                if threshold == 0:
                    assert len(result) == min(limit, len(mine))
            else:
                assert len(result) == min(limit, len(mine))
        elif proc == "keys.create":
            assert result["name"] == fields["name"] and result["idpUserId"] == "tenant-A"
            self.key_tenants[result["id"]] = "tenant-A"
        elif proc == "keys.list":
            assert {k["id"] for k in result} == {
                key for key, tenant in self.key_tenants.items() if tenant == "tenant-A"
            }
        elif proc == "keys.revoke":
            assert result == {"success": True}
            if (
                self.key_tenants.get(fields["id"].lower()) == "tenant-A"
                and fields["id"].lower() == self.key_ids["tenant-A"]
            ):
                # The caller revoked the key it works with: carry on with a new one.
                created = self.ok(self.call("keys.create", {"name": "fuzz"}))
                self.key_tenants[created["id"]] = "tenant-A"
                self.key_ids["tenant-A"] = created["id"]
                self.secrets["tenant-A"] = created["secret"]


def check_envelope(resp: t.Any, *, path: str | None = None, calls: int | None = None) -> t.Any:
    """The property every answer has: JSON, a known envelope, status = httpStatus, no 5xx.

    ``path``, when given, is the procedure every error item must name (or
    none, for an error about the request as a whole). ``calls``, when given,
    is how many items a batch answer must hold.
    """
    figures.count("fuzz")
    assert resp.status_code < 500, (resp.status_code, resp.data[:500])
    assert resp.headers.get("Content-Type") == "application/json", resp.headers
    body = json.loads(resp.data.decode("utf-8"), parse_constant=_no_constants)
    if isinstance(body, list):
        assert body, "a batch answer holds one item per call"
        assert calls is None or len(body) == calls, (calls, body)
        statuses = [_check_item(item, path) for item in body]
        common = statuses[0] if len(set(statuses)) == 1 else 207
        assert resp.status_code == common, (resp.status_code, statuses)
    else:
        assert resp.status_code == _check_item(body, path), (resp.status_code, body)
    return body


def _no_constants(name: str) -> t.NoReturn:
    raise AssertionError(f"the answer holds {name}, which is not JSON")


def _check_item(item: t.Any, path: str | None) -> int:
    assert isinstance(item, dict), item
    if "result" in item:
        assert list(item) == ["result"] and list(item["result"]) == ["data"], item
        return 200
    error = item.get("error")
    assert isinstance(error, dict), item
    code = error.get("code")
    assert code in CLIENT_ERRORS, item
    named = error.get("data", {}).get("path")
    assert named is None or path is None or named == path, (path, item)
    assert_error_item(item, CLIENT_ERRORS[code], code, named)
    return CLIENT_ERRORS[code]


@pytest.fixture
def fuzz_app(make_app):
    def make(**settings: t.Any) -> t.Any:
        app = make_app(
            RATE_LIMIT_PER_MINUTE=0,
            CONCURRENCY_LIMIT=0,
            KEYS_RATE_LIMIT_PER_MINUTE=0,
            MAX_KEYS_PER_TENANT=0,
            JWT_SECRET=JWT_SECRET,
            PROPAGATE_EXCEPTIONS=False,
            **settings,
        )
        app.extensions["memsvc"].embedder = HashEmbedder(384, BUNDLED_MODEL)
        return app

    return make


@pytest.fixture
def wire(fuzz_app):
    return Wire(fuzz_app())


@pytest.fixture
def model_wire(make_app):
    """A wire whose app embeds with the bundled model itself."""
    return Wire(
        make_app(
            RATE_LIMIT_PER_MINUTE=0,
            CONCURRENCY_LIMIT=0,
            KEYS_RATE_LIMIT_PER_MINUTE=0,
            MAX_KEYS_PER_TENANT=0,
            JWT_SECRET=JWT_SECRET,
            PROPAGATE_EXCEPTIONS=False,
        )
    )


# -- structured inputs ------------------------------------------------------------------


@settings(FUZZ, max_examples=500 * figures.SCALE)
@given(data=st.data())
def test_every_procedure_answers_any_input_object_as_the_readme_says(wire, data):
    proc = data.draw(st.sampled_from(PROCEDURES), label="procedure")
    fields = wire.resolve(data.draw(INPUTS[proc], label="input"))
    ensure_ascii = data.draw(st.booleans(), label="ensure_ascii")
    resp = wire.call(proc, fields, ensure_ascii=ensure_ascii)
    body = check_envelope(resp, path=proc)
    event(f"{proc} -> {resp.status_code}")
    assert resp.status_code == wire.expect(proc, fields), (proc, fields, body)
    if resp.status_code == 200:
        wire.learn(proc, fields, body["result"]["data"])
    else:
        assert body["error"]["message"]


@settings(FUZZ, max_examples=80 * figures.SCALE)
@given(proc=st.sampled_from(PROCEDURES), value=JSON_VALUES)
def test_any_json_value_as_the_input_is_an_envelope(wire, proc, value):
    resp = wire.call(proc, value)
    body = check_envelope(resp, path=proc)
    if not isinstance(value, dict) and proc != "keys.list":
        assert resp.status_code == 400
        assert body["error"]["message"].startswith("Invalid input: expected object, received")


@settings(FUZZ, max_examples=60 * figures.SCALE)
@given(
    proc=st.sampled_from(PROCEDURES),
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
    credential=st.sampled_from(["own", "none", "other router's", "garbage"]),
    value=JSON_VALUES,
)
def test_wrong_methods_and_credentials_are_refused_in_the_documented_order(
    wire, proc, method, credential, value
):
    headers = {
        "own": wire.headers(proc, "tenant-A"),
        "none": {},
        "other router's": {
            "x-api-key": wire.secrets["tenant-A"],
            "Authorization": "Bearer " + wire.secrets["tenant-A"],
        }
        if proc.startswith("keys.")
        else {"Authorization": "Bearer " + wire.tokens["tenant-A"]},
        "garbage": {"x-api-key": "sk_memsvc_" + "0" * 64, "Authorization": "Bearer a.b.c"},
    }[credential]
    if method == "GET":
        resp = wire.client.get(
            f"/trpc/{proc}", query_string={"input": compact(value)}, headers=headers
        )
    else:
        resp = wire.client.open(
            f"/trpc/{proc}",
            method=method,
            data=compact(value),
            headers={**headers, "Content-Type": "application/json"},
        )
    check_envelope(resp, path=proc)
    right_method = method == ("GET" if proc in QUERIES else "POST")
    if not right_method:
        assert resp.status_code == 405
        assert resp.headers["Allow"] == ("GET" if proc in QUERIES else "POST")
    elif credential != "own":
        assert resp.status_code == 401


# -- raw bytes ------------------------------------------------------------------------------

NUMBER_LITERALS = ["-0", "0e0", "1E400", "1e-400", "1" * 5000, "0." + "1" * 5000, "-", "01", "1."]
RAW_FRAGMENTS = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=20).map(str.encode),
    st.sampled_from(
        [
            b'{"userId":"u","content":"\\ud800"}',
            b'{"userId":"\\udfff","content":"x"}',
            b'{"userId":"u","content":"x","metadata":{"\\ud800":1}}',
            b'{"userId":"u","content":"a\\u0000b"}',
            b'{"userId":"u","content":"\xff\xfe"}',
            b'{"userId":"u","content":"\xed\xa0\x80"}',
            b'{"userId":"u","content":"\xc0\xaf"}',
            b"\xef\xbb\xbf{}",
            b"\xff\xfe{\x00}\x00",
            b'{"a":NaN}',
            b"Infinity",
            b'{"userId":"u","query":"q","threshold":-Infinity}',
            b"[" * 5000 + b"]" * 5000,
            b'{"a":' * 3000 + b"1" + b"}" * 3000,
            b'{"0":{"userId":"u","content":"x"}}',
            b'{"userId":"u","userId":7,"content":"x"}',
            b"",
            b"   ",
            b"null",
            b'"\\ud800"',
        ]
    ),
    st.sampled_from(NUMBER_LITERALS).map(
        lambda n: b'{"userId":"u","content":"x","limit":' + n.encode() + b"}"
    ),
)
CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "application/json; charset=latin-1",
        "application/jsonx",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "",
        None,
    ]
)


@settings(FUZZ, max_examples=120 * figures.SCALE)
@given(
    proc=st.sampled_from(PROCEDURES + ("memory.nope", "")),
    parts=st.lists(RAW_FRAGMENTS, min_size=1, max_size=3),
    content_type=CONTENT_TYPES,
    batch=st.booleans(),
)
def test_raw_bodies_are_answered_with_an_envelope(wire, proc, parts, content_type, batch):
    body = b"".join(parts)
    headers = wire.headers(proc, "tenant-A") if proc in PROCEDURES else {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    url = f"/trpc/{proc}" + ("?batch=1" if batch else "")
    resp = wire.client.post(url, data=body, headers=headers)
    check_envelope(resp, path=proc, calls=1 if batch and resp.status_code != 415 else None)
    if content_type is None or not content_type.lower().startswith("application/json"):
        assert resp.status_code == 415


@settings(FUZZ, max_examples=120 * figures.SCALE)
@given(
    proc=st.sampled_from(QUERIES + ("memory.add", "memory.nope")),
    query=st.lists(
        st.one_of(
            st.text(alphabet='%0123456789abcdefABCDEFzZ+&=;{}[]":,inputbatch\\ ', max_size=30),
            st.sampled_from(
                [
                    "input=%",
                    "input=%2",
                    "input=%zz",
                    "input=%ff",
                    "input=%ed%a0%80",
                    "input=%c0%af",
                    "input=%7b%22userId%22%3a%22%00%22%7d",
                    "input=%7B%22userId%22:%22u%22%7D",
                    "%69nput=%7b%22userId%22%3a%22u%22%7d",
                    "input=" + "%7b" * 3000,
                    'input={"userId":"u","limit":1e999}',
                    'input={"userId":"u","query":"q","threshold":NaN}',
                    'input={"id":"' + "0" * 36 + '"}',
                    "input=",
                    "input",
                    "batch=1",
                    "batch=%31",
                    "batch=true",
                    "&&&",
                    "=",
                ]
            ),
            st.text(max_size=10).map(lambda s: "input=" + s),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_raw_query_strings_are_answered_with_an_envelope(wire, proc, query):
    qs = "&".join(query)
    headers = wire.headers(proc, "tenant-A") if proc in PROCEDURES else {}
    resp = wire.client.get(f"/trpc/{proc}", query_string=qs, headers=headers)
    check_envelope(resp, path=proc)


# -- batches ----------------------------------------------------------------------------------

SEGMENTS = st.one_of(
    st.sampled_from(PROCEDURES),
    st.sampled_from(["", " ", "memory", "memory.", ".add", "keys.nope", "memory.add ", "health"]),
    st.text(max_size=8).filter(lambda s: "," not in s and "/" not in s and "?" not in s),
)


@settings(FUZZ, max_examples=120 * figures.SCALE)
@given(
    data=st.data(),
    segments=st.one_of(
        st.lists(SEGMENTS, min_size=1, max_size=6),
        st.integers(95, 105).map(lambda n: ["memory.getAll"] * n),
        st.just(["memory.getById"] * 200),
        st.just(["", ""]),
        st.just(["memory.add", "", ""]),
    ),
    method=st.sampled_from(["GET", "POST"]),
    batch=st.sampled_from(["1", "1", "1", "0", "true", "", "%31"]),
)
def test_batches_of_any_shape_are_answered_call_by_call(wire, data, segments, method, batch):
    path = ",".join(quote(segment, safe=".") for segment in segments)
    inputs = data.draw(
        st.one_of(
            st.dictionaries(
                st.one_of(st.integers(-1, len(segments)).map(str), st.text(max_size=3)),
                JSON_VALUES,
                max_size=len(segments) + 1,
            ),
            st.fixed_dictionaries(
                {
                    str(i): st.sampled_from([{"userId": "u"}, {"id": MISSING}, {}])
                    for i in range(min(len(segments), 10))
                }
            ),
            JSON_VALUES,
        ),
        label="inputs",
    )
    headers = {
        "x-api-key": wire.secrets["tenant-A"],
        "Authorization": f"Bearer {wire.tokens['tenant-A']}",
    }
    url = f"/trpc/{path}?batch={batch}"
    if method == "GET":
        resp = wire.client.get(url + "&input=" + quote(compact(inputs), safe=""), headers=headers)
    else:
        resp = wire.client.post(
            url, data=compact(inputs), headers=headers, content_type="application/json"
        )
    body = check_envelope(resp)
    kinds = {p in QUERIES for p in segments if p in PROCEDURES}
    whole_request_error = len(segments) > 100 or len(kinds) > 1
    if batch not in ("1", "%31"):
        assert not isinstance(body, list)
    elif whole_request_error:
        assert resp.status_code == 400 and "path" not in body["error"]["data"], body
    else:
        assert isinstance(body, list) and len(body) == len(segments)
        for segment, item in zip(segments, body, strict=True):
            if "error" in item:
                assert item["error"]["data"]["path"] == segment
            if segment not in PROCEDURES:
                assert item["error"]["code"] == "NOT_FOUND"


# -- credentials ------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hs256(claims: t.Any, secret: str = JWT_SECRET, header: t.Any = None) -> str:
    """A token signed the way memsvc's local mode checks, with any claims at all."""
    head = _b64(compact({"alg": "HS256", "typ": "JWT"} if header is None else header).encode())
    body = _b64(compact(claims).encode())
    signature = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def _claims(tenant: t.Any, **extra: t.Any) -> dict[str, t.Any]:
    return {"sub": tenant, "iss": "memsvc", "exp": int(time.time()) + 600, **extra}


LATIN1 = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=60)
TOKENS = st.one_of(
    LATIN1,
    st.lists(
        st.text(alphabet="ABCDEFabcdef0123456789-_=+/", max_size=40), min_size=1, max_size=5
    ).map(".".join),
    st.builds(lambda c: hs256(c, secret="y" * 40), st.dictionaries(TEXTS, SCALARS, max_size=3)),
    st.builds(lambda c: hs256(c, header={"alg": "none"})[:-43], st.just(_claims("tenant-A"))),
    st.builds(lambda h: hs256(_claims("tenant-A"), header=h), st.dictionaries(TEXTS, SCALARS)),
    # Signed with the right secret but never valid: no "exp".
    st.builds(
        lambda c: hs256({k: v for k, v in c.items() if k != "exp"}),
        st.dictionaries(TEXTS, JSON_VALUES, max_size=3),
    ),
    st.sampled_from(
        [
            hs256(_claims("tenant-A", exp=1)),
            hs256(_claims("tenant-A", nbf=int(time.time()) + 3600)),
            hs256(_claims("tenant-A", exp="tomorrow")),
            hs256({"sub": "tenant-A", "iss": "memsvc"}),
            hs256(_claims(["tenant-A"])),
            hs256(_claims({"id": "tenant-A"})),
            hs256(_claims(7)),
            hs256(_claims("   ")),
            hs256([1, 2]),
            hs256("just a string"),
            "Bearer",
            "x" * 100_000,
        ]
    ),
)
AUTHORIZATIONS = st.one_of(
    TOKENS.map(lambda tok: "Bearer " + tok),
    TOKENS.map(lambda tok: "bearer  " + tok + " "),
    TOKENS.map(lambda tok: "Basic " + tok),
    TOKENS,
)


@settings(FUZZ, max_examples=120 * figures.SCALE)
@given(proc=st.sampled_from(["keys.list", "keys.create", "keys.revoke"]), auth=AUTHORIZATIONS)
def test_forged_or_malformed_bearer_tokens_are_401(wire, proc, auth):
    try:
        auth.encode("latin-1")
    except UnicodeEncodeError:
        assume(False)
    headers = {"Authorization": auth}
    if proc == "keys.list":
        resp = wire.client.get(f"/trpc/{proc}", headers=headers)
    else:
        resp = wire.client.post(f"/trpc/{proc}", json={"name": "n", "id": MISSING}, headers=headers)
    body = check_envelope(resp, path=proc)
    assert resp.status_code == 401, body


MISSING = "00000000-0000-4000-8000-000000000000"
TENANT_CLAIMS = st.one_of(
    st.text(max_size=30).filter(lambda s: s.strip()),
    st.sampled_from(HOSTILE),
    st.text(max_size=6).map(lambda s: "t" + s + "\x00" + s),
    st.integers(250, 300).map(lambda n: "t" * n),
)


def printable_tenant(tenant: str) -> bool:
    """A tenant id memsvc accepts: no control or format characters, at most 512 long."""
    return len(tenant) <= 512 and not any(
        unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in tenant
    )


@settings(FUZZ, max_examples=60 * figures.SCALE)
@given(tenant=TENANT_CLAIMS)
def test_any_tenant_claim_a_valid_token_names_is_its_own_tenant(wire, tenant):
    token = hs256(_claims(tenant))
    headers = {"Authorization": f"Bearer {token}"}
    if not printable_tenant(tenant):
        # "tenantA\u0000" must not be a tenant of its own, nor reach a terminal.
        resp = wire.client.get("/trpc/keys.list", headers=headers)
        check_envelope(resp, path="keys.list")
        assert resp.status_code == 401
        return
    before = wire.ok(wire.client.get("/trpc/keys.list", headers=headers))
    created = wire.ok(wire.client.post("/trpc/keys.create", json={"name": "k"}, headers=headers))
    assert created["idpUserId"] == tenant
    listed = wire.ok(wire.client.get("/trpc/keys.list", headers=headers))
    assert [k["id"] for k in listed] == [k["id"] for k in before] + [created["id"]]
    # The new key works, and reaches only its own tenant's memories.
    added = wire.ok(
        wire.client.post(
            "/trpc/memory.add",
            json={"userId": "u", "content": "mine"},
            headers={"x-api-key": created["secret"]},
        )
    )
    assert added["idpUserId"] == tenant
    for memory_id, memory in wire.memories.items():
        resp = wire.client.get(
            "/trpc/memory.getById",
            query_string={"input": compact({"id": memory_id})},
            headers={"x-api-key": created["secret"]},
        )
        check_envelope(resp, path="memory.getById")
        assert resp.status_code == (200 if memory["idpUserId"] == tenant else 404)


def test_a_token_whose_tenant_claim_is_not_unicode_text_is_refused_with_401(wire):
    token = hs256(_claims("acme-\ud800"))
    headers = {"Authorization": f"Bearer {token}"}
    resp = wire.client.get("/trpc/keys.list", headers=headers)
    check_envelope(resp, path="keys.list")
    assert resp.status_code == 401


API_KEYS = st.one_of(
    LATIN1,
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sk_memsvc_" + h),
    st.sampled_from(HOSTILE).filter(lambda s: s.isascii() and "\r" not in s),
    st.integers(1, 73).map(lambda n: ("sk_memsvc_" + "f" * 64)[:n]),
)


@settings(FUZZ, max_examples=80 * figures.SCALE)
@given(data=st.data(), api_key=API_KEYS)
def test_any_api_key_that_was_not_issued_is_401(wire, data, api_key):
    real = wire.secrets["tenant-A"]
    variant = data.draw(
        st.sampled_from(
            [
                api_key,
                real[:-1],
                real + "0",
                real.upper(),
                " " + real + "x",
                real[:-1] + ("0" if real[-1] != "0" else "1"),
                real.replace("sk_memsvc_", "sk_other_"),
            ]
        ),
        label="variant",
    )
    assume(variant.strip() != real)
    resp = wire.client.get(
        "/trpc/memory.getAll",
        query_string={"input": compact({"userId": "u"})},
        headers={"x-api-key": variant},
    )
    body = check_envelope(resp, path="memory.getAll")
    assert resp.status_code == 401
    assert real not in resp.get_data(as_text=True)
    assert body["error"]["message"] in (
        "Invalid API key",
        "Missing API key: send it in the x-api-key header",
    )


# -- hostile strings, as data -----------------------------------------------------------------


@settings(FUZZ, max_examples=60 * figures.SCALE)
@given(
    hostile=st.sampled_from(HOSTILE),
    field=st.sampled_from(["userId", "content", "metadata key", "metadata value", "query", "name"]),
)
def test_injection_looking_strings_are_stored_and_returned_verbatim(wire, hostile, field):
    user, content, metadata = (
        f"u-hostile-{uuid.uuid4().hex[:8]}",
        f"plain {uuid.uuid4()}",
        {"k": "v"},
    )
    if field == "userId":
        user = hostile
    elif field == "content":
        content = hostile + " " + content
    elif field == "metadata key":
        metadata = {hostile: hostile}
    elif field == "metadata value":
        metadata = {"k": [hostile, {"nested": hostile}]}
    if field == "name":
        if not text_ok(hostile, MAX_NAME, printable=True):
            # Control characters (a bidi override, a line break) are refused in key names.
            resp = wire.call("keys.create", {"name": hostile})
            assert resp.status_code == 400, resp.get_json()
            return
        created = wire.ok(wire.call("keys.create", {"name": hostile}))
        assert created["name"] == hostile
        wire.key_tenants[created["id"]] = "tenant-A"
        listed = wire.ok(wire.call("keys.list", {}))
        assert hostile in [k["name"] for k in listed]
        return
    fields = {"userId": user, "content": content, "metadata": metadata}
    added = wire.ok(wire.call("memory.add", fields))
    wire.memories[added["id"]] = added
    assert (added["userId"], added["content"], added["metadata"]) == (user, content, metadata)
    listed = wire.ok(wire.call("memory.getAll", {"userId": user, "limit": 1000}))
    mine = {
        m for m, v in wire.memories.items() if v["userId"] == user and v["idpUserId"] == "tenant-A"
    }
    assert {m["id"] for m in listed} == mine
    query = hostile if field == "query" else content
    found = wire.ok(
        wire.call("memory.search", {"userId": user, "query": query, "threshold": 0, "limit": 100})
    )
    # A hostile userId repeats across examples, so its user may hold more
    # than one search can return.
    assert {m["id"] for m in found} <= mine and len(found) == min(len(mine), 100)
    # Nothing else moved: tenant B still has exactly its own memories and key.
    other = wire.ok(wire.call("memory.getAll", {"userId": "u"}, tenant="tenant-B"))
    assert {m["id"] for m in other} == {
        m for m, v in wire.memories.items() if v["idpUserId"] == "tenant-B"
    }


# -- sizes at and past every limit ------------------------------------------------------------


@pytest.mark.parametrize(
    "size, status",
    [(MIB - 200, 200), (MIB, 200), (MIB + 1, 413), (5 * MIB, 413)],
)
def test_bodies_up_to_one_mebibyte_are_read_and_larger_ones_are_413(fuzz_app, size, status):
    app = fuzz_app(MAX_CONTENT_CHARS=MIB)
    wire = Wire(app)
    envelope = compact({"userId": "big", "content": ""})
    content = "b" * (size - len(envelope))
    resp = wire.call("memory.add", {"userId": "big", "content": content})
    assert len(compact({"userId": "big", "content": content})) == size
    check_envelope(resp, path="memory.add")
    assert resp.status_code == status


@pytest.mark.parametrize(
    "metadata, status",
    [
        ({"b": "x" * (MAX_METADATA_BYTES - 8)}, 200),
        ({"b": "x" * (MAX_METADATA_BYTES - 7)}, 400),
        (_nested(MAX_METADATA_DEPTH), 200),
        (_nested(MAX_METADATA_DEPTH + 1), 400),
        (_nested(500), 400),
        ({str(i): i for i in range(4000)}, 200),
        ({"é": "ü" * ((MAX_METADATA_BYTES - 9) // 2)}, 200),
        ({"é": "ü" * ((MAX_METADATA_BYTES - 9) // 2 + 1)}, 400),
    ],
    ids=[
        "64KiB",
        "64KiB+1",
        "depth32",
        "depth33",
        "depth500",
        "4000keys",
        "utf8-fits",
        "utf8-over",
    ],
)
def test_metadata_at_and_past_its_limits(wire, metadata, status):
    resp = wire.call("memory.add", {"userId": "meta", "content": "x", "metadata": metadata})
    body = check_envelope(resp, path="memory.add")
    assert resp.status_code == status, body
    if status == 200:
        assert body["result"]["data"]["metadata"] == metadata
    else:
        assert body["error"]["message"].startswith("Invalid input: metadata:")


@pytest.mark.parametrize(
    "fields, status",
    [
        ({"userId": "u" * MAX_USER_ID, "content": "x"}, 200),
        ({"userId": "u" * (MAX_USER_ID + 1), "content": "x"}, 400),
        ({"userId": "\U0001f600" * MAX_USER_ID, "content": "x"}, 200),
        ({"userId": "u", "content": "c" * MAX_CONTENT}, 200),
        ({"userId": "u", "content": "c" * (MAX_CONTENT + 1)}, 400),
        ({"userId": "u", "content": "a\x00b"}, 400),
        ({"userId": "u\x00", "content": "x"}, 400),
        ({"userId": "u", "content": "\ud800"}, 400),
        ({"userId": "\udfff", "content": "x"}, 400),
        ({"userId": "u", "content": "x", "metadata": {"\ud800": 1}}, 400),
        ({"userId": "u", "content": "x", "metadata": {"k": ["\udbff"]}}, 400),
        ({"userId": "u", "content": "x", "metadata": {"k": "a\x00b"}}, 200),
    ],
)
def test_text_fields_at_and_past_their_limits(wire, fields, status):
    resp = wire.call("memory.add", fields)
    body = check_envelope(resp, path="memory.add")
    assert resp.status_code == status, body
    if status == 200:
        wire.learn("memory.add", fields, body["result"]["data"])


def test_a_batch_of_two_hundred_calls_is_refused_whole_and_a_hundred_are_served(wire):
    for n, status in ((200, 400), (101, 400), (100, 200)):
        path = ",".join(["memory.getAll"] * n)
        inputs = {str(i): {"userId": f"user-{i}"} for i in range(n)}
        resp = wire.client.get(
            f"/trpc/{path}",
            query_string={"batch": "1", "input": compact(inputs)},
            headers={"x-api-key": wire.secrets["tenant-A"]},
        )
        check_envelope(resp, calls=None if status == 400 else n)
        assert resp.status_code == status


# -- known bugs -------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["1e999", "-1e999"])
def test_a_number_beyond_the_double_range_in_metadata_is_refused_not_stored(wire, literal):
    raw = '{"userId":"poisoned","content":"x","metadata":{"n":' + literal + "}}"
    resp = wire.client.post(
        "/trpc/memory.add",
        data=raw,
        headers={"x-api-key": wire.secrets["tenant-A"], "Content-Type": "application/json"},
    )
    # Whatever the add answers, the user's memories must stay readable.
    listed = wire.call("memory.getAll", {"userId": "poisoned"})
    check_envelope(listed, path="memory.getAll")
    found = wire.call("memory.search", {"userId": "poisoned", "query": "x", "threshold": 0})
    check_envelope(found, path="memory.search")
    check_envelope(resp, path="memory.add")
    assert resp.status_code == 400


@pytest.mark.parametrize("proc", ["memory.getById", "memory.delete", "keys.revoke"])
def test_an_id_with_a_trailing_newline_is_400_like_any_other_non_uuid(wire, proc):
    resp = wire.call(proc, {"id": MISSING + "\n"})
    check_envelope(resp, path=proc)
    assert resp.status_code == 400


def test_a_chunked_body_over_the_limit_is_413_like_one_with_a_content_length(wire):
    """gunicorn hands chunked bodies over without a Content-Length, the stream terminated."""
    body = (
        b'{"userId":"chunked","content":"x"}' + b" " * MIB + b"and then anything at all, never read"
    )
    environ = EnvironBuilder(
        path="/trpc/memory.add",
        method="POST",
        headers={
            "x-api-key": wire.secrets["tenant-A"],
            "Content-Type": "application/json",
            "Transfer-Encoding": "chunked",
        },
    ).get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["wsgi.input_terminated"] = True
    chunks, status, headers = run_wsgi_app(wire.app, environ, buffered=True)
    resp = wire.app.response_class(b"".join(chunks), status=status, headers=headers)
    listed = wire.ok(wire.call("memory.getAll", {"userId": "chunked"}))
    check_envelope(resp, path="memory.add")
    assert resp.status_code == 413
    assert listed == []


def test_identical_memories_score_the_same_and_come_newest_first(wire):
    """Found by the bundled-model fuzzer: a text stored three times, searched by itself."""
    texts = [f"text {w}" for w in range(20)]
    wrong = []
    for text in texts:
        user = f"duplicates of {text}"
        ids = [
            wire.ok(wire.call("memory.add", {"userId": user, "content": text}))["id"]
            for _ in range(3)
        ]
        query = {"userId": user, "query": text, "threshold": 0, "limit": 10}
        found = wire.ok(wire.call("memory.search", query))
        sims = sorted({m["similarity"] for m in found})
        if [m["id"] for m in found] != ids[::-1] or len(sims) > 1:
            order = [ids.index(m["id"]) for m in found]
            wrong.append(f"{text!r}: insertion order {order}, similarities {sims}")
    assert not wrong, wrong


# -- the real model, on unusual text ----------------------------------------------------------


@settings(FUZZ, max_examples=25 * figures.SCALE)
@given(
    text=st.one_of(
        st.text(min_size=1, max_size=300),
        st.text(alphabet=st.characters(categories=["Mn", "Me", "Cf", "Co", "Zs"]), max_size=80),
        st.text(alphabet=st.characters(categories=["Lo", "So"]), min_size=200, max_size=1500),
        st.sampled_from(["\U0001f600" * 600, "a" * 5000, "\u0301" * 3000, "word " * 400]),
    )
)
def test_the_bundled_model_embeds_any_text_and_finds_it_first(model_wire, text):
    assume(text.strip() and "\x00" not in text)
    wire = model_wire
    resp = wire.call("memory.add", {"userId": "u", "content": text})
    body = check_envelope(resp, path="memory.add")
    # Any length up to the size limit: a text longer than the model takes
    # is embedded as windows.
    assert resp.status_code == 200, body
    query = {"userId": "u", "query": text, "threshold": 0, "limit": 100}
    found = {m["id"]: m["similarity"] for m in wire.ok(wire.call("memory.search", query))}
    # Most similar to itself. Texts the model reads as the same tokens (say, only
    # combining marks) tie with it, up to the model's float noise.
    assert found[body["result"]["data"]["id"]] >= max(found.values()) - 1e-6


# -- hostile filters ---------------------------------------------------------------------------


def _nested(depth: int, leaf: t.Any) -> t.Any:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


HUGE = int("9" * 401)

HOSTILE_FILTERS = st.one_of(
    # Numbers a double cannot hold, as operands of every operator.
    st.builds(
        lambda op, sign: {"n": {op: sign * HUGE}},
        st.sampled_from(["gt", "gte", "lt", "lte", "eq", "ne", "contains"]),
        st.sampled_from([1, -1]),
    ),
    st.builds(lambda v: {"n": {"in": [1, v]}}, st.just(HUGE)),
    # Operands nested past what metadata may be, up to the parser's own limit.
    st.builds(
        lambda depth, op: {"n": {op: _nested(depth, 1)}},
        st.integers(33, 980),
        st.sampled_from(["eq", "ne", "contains", "in"]),
    ),
    # Text that is not Unicode, in keys, operators and operands.
    st.builds(lambda s: {s: 1}, _with_surrogate()),
    st.builds(lambda s: {"k": {s: 1}}, _with_surrogate()),
    st.builds(lambda s: {"k": {"eq": s}}, _with_surrogate()),
    st.builds(lambda s: {"k": {"gt": s}}, _with_surrogate()),
    st.builds(lambda s: {"k": {"in": ["a", {s: [s]}]}}, _with_surrogate()),
    # Too many conditions, or too large.
    st.builds(lambda n: {f"k{i}": {"exists": False} for i in range(n)}, st.integers(33, 3000)),
    st.builds(lambda n: {"k": {"in": ["x" * 64] * n}}, st.integers(300, 2000)),
    st.builds(lambda n: {".".join(["a"] * n): 1}, st.integers(33, 400)),
)


@FUZZ
@given(flt=HOSTILE_FILTERS, proc=st.sampled_from(["memory.search", "memory.getAll"]))
def test_hostile_filters_are_400_in_the_envelope_even_in_a_batch(wire, flt, proc):
    body = {"userId": "u", "query": "anything", "filter": flt}
    resp = wire.call(proc, body)
    check_envelope(resp, path=proc)
    assert resp.status_code == 400, resp.data[:300]
    message = resp.get_json()["error"]["message"]
    assert message.startswith("Invalid input: filter")
    # In a batch, the other call's answer is kept.
    batch = wire.client.get(
        f"/trpc/{proc},memory.getAll?batch=1&input="
        + quote(compact({"0": body, "1": {"userId": "nobody"}}, True)),
        headers=wire.headers(proc, "tenant-A"),
    )
    items = check_envelope(batch, calls=2)
    assert batch.status_code == 207
    assert items[1] == {"result": {"data": []}}


@pytest.mark.parametrize("value", [HUGE, -HUGE])
def test_numbers_a_filter_cannot_compare_are_refused_at_add_and_update(wire, value):
    added = wire.call("memory.add", {"userId": "u", "content": "x", "metadata": {"n": value}})
    check_envelope(added, path="memory.add")
    assert added.status_code == 400
    assert "range of a double" in added.get_json()["error"]["message"]
    memory = wire.call("memory.add", {"userId": "u", "content": "x", "metadata": {"n": 1}})
    updated = wire.call(
        "memory.update", {"id": memory.get_json()["result"]["data"]["id"], "metadata": {"n": value}}
    )
    check_envelope(updated, path="memory.update")
    assert updated.status_code == 400


@pytest.mark.parametrize("cache_mb", [256, 0])
def test_numbers_stored_before_they_were_refused_never_break_a_filter(fuzz_app, cache_mb):
    """A database may hold such numbers from before: filters pass over them, never 500."""
    import numpy as np

    from memsvc.api.context import runtime
    from memsvc.models import Memory

    wire = Wire(fuzz_app(SEARCH_CACHE_MB=cache_mb))
    with wire.app.app_context():
        rt = runtime()
        store = rt.store()
        vectors = np.eye(2, rt.embedder.dimensions, dtype=np.float32)
        with store.write():
            store.insert_memories(
                [
                    Memory(str(uuid.uuid4()), "tenant-A", "u", "huge", {"n": HUGE}, 1, 1),
                    Memory(str(uuid.uuid4()), "tenant-A", "u", "small", {"n": 5}, 2, 2),
                ],
                vectors,
            )
    for proc in ("memory.getAll", "memory.search"):
        for op in ("gt", "gte", "lt", "lte"):
            resp = wire.call(
                proc, {"userId": "u", "query": "x", "threshold": 0, "filter": {"n": {op: 1}}}
            )
            items = check_envelope(resp, path=proc)
            assert resp.status_code == 200
            found = {m["content"] for m in items["result"]["data"]}
            assert found == ({"small"} if op.startswith("gt") else set()), (proc, op)
