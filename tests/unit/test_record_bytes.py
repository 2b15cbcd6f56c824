"""A memory as the API answers it and as an export file holds it, byte for byte.

Both are contracts: clients parse the one, and files written by any earlier
``memsvc export`` must import and equal a new export of the same data.
"""

from __future__ import annotations

import json

import numpy as np

from memsvc import wire
from memsvc.api import outputs
from memsvc.models import ApiKey
from memsvc.models import Memory
from memsvc.models import Version
from memsvc.services import transfer

CREATED = 1795346643116  # 2026-11-22T11:24:03.116Z
UPDATED = CREATED + 60_000
EXPIRES = CREATED + 86_400_000

PLAIN = Memory(
    "3b0f1fd4-5a1e-4e59-8a4c-0d0c6f3b8d2a",
    "acme",
    "bob",
    "Bob runs ü",
    {"category": "sport", "n": [1, 2.5]},
    CREATED,
    CREATED,
)
UPDATED_EXPIRING = Memory(
    "4c1e2ae5-6b2f-4f6a-9b5d-1e1d7a4c9e3b",
    "acme",
    "alice",
    "Alice swims",
    {},
    CREATED,
    UPDATED,
    EXPIRES,
    2,
)
HISTORY = [
    Version(1, "Alice swam", {}, "add", CREATED),
    Version(2, "Alice swims", {"k": None}, "update", UPDATED),
]


def compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_the_api_answers_a_memory_in_this_order_leaving_out_a_missing_expiry():
    assert compact(outputs.MEMORY.dump(PLAIN)) == (
        '{"id":"3b0f1fd4-5a1e-4e59-8a4c-0d0c6f3b8d2a","content":"Bob runs ü","userId":"bob",'
        '"idpUserId":"acme","metadata":{"category":"sport","n":[1,2.5]},'
        '"createdAt":"2026-11-22T11:24:03.116Z","updatedAt":"2026-11-22T11:24:03.116Z"}'
    )
    assert compact(outputs.MEMORY.dump(UPDATED_EXPIRING)) == (
        '{"id":"4c1e2ae5-6b2f-4f6a-9b5d-1e1d7a4c9e3b","content":"Alice swims","userId":"alice",'
        '"idpUserId":"acme","metadata":{},"createdAt":"2026-11-22T11:24:03.116Z",'
        '"updatedAt":"2026-11-22T11:25:03.116Z","expiresAt":"2026-11-23T11:24:03.116Z"}'
    )


def test_the_api_answers_versions_in_this_order():
    assert compact(outputs.VERSIONS.dump(HISTORY)) == (
        '[{"version":1,"content":"Alice swam","metadata":{},"event":"add",'
        '"at":"2026-11-22T11:24:03.116Z"},{"version":2,"content":"Alice swims",'
        '"metadata":{"k":null},"event":"update","at":"2026-11-22T11:25:03.116Z"}]'
    )


def test_an_export_line_holds_a_memory_in_this_order_with_a_missing_expiry_as_null():
    vectors = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype=np.float32)
    assert transfer._record_line(PLAIN, [], vectors[:1]) == (
        '{"id":"3b0f1fd4-5a1e-4e59-8a4c-0d0c6f3b8d2a","tenant":"acme","userId":"bob",'
        '"content":"Bob runs ü","metadata":{"category":"sport","n":[1,2.5]},'
        '"createdAt":"2026-11-22T11:24:03.116Z","updatedAt":"2026-11-22T11:24:03.116Z",'
        '"expiresAt":null,"version":1,"history":[],"vectors":["AAAAAAAAgD8AAABA"]}\n'
    )
    assert transfer._record_line(UPDATED_EXPIRING, HISTORY, vectors) == (
        '{"id":"4c1e2ae5-6b2f-4f6a-9b5d-1e1d7a4c9e3b","tenant":"acme","userId":"alice",'
        '"content":"Alice swims","metadata":{},"createdAt":"2026-11-22T11:24:03.116Z",'
        '"updatedAt":"2026-11-22T11:25:03.116Z","expiresAt":"2026-11-23T11:24:03.116Z",'
        '"version":2,"history":[{"version":1,"content":"Alice swam","metadata":{},'
        '"event":"add","at":"2026-11-22T11:24:03.116Z"},{"version":2,"content":"Alice swims",'
        '"metadata":{"k":null},"event":"update","at":"2026-11-22T11:25:03.116Z"}],'
        '"vectors":["AAAAAAAAgD8AAABA","AABAQAAAgEAAAKBA"]}\n'
    )


def test_an_export_line_holds_every_field_of_the_memory_the_api_answers():
    # A field added to the Memory goes into export files too (in a new
    # format version), or is left out of them here on purpose.
    exported = [*transfer.MEMORY_FIELDS.values(), *transfer.MEMORY_EXTRAS]
    assert sorted(exported) == sorted(f.name for f in wire.MEMORY.fields)


def test_an_export_line_holds_an_api_key_in_this_order():
    key = ApiKey(
        "5d2f3bf6-7c3a-4a7b-8c6e-2f2e8b5d0f4c",
        "acme",
        "key_0123456789abcdef",
        "staging",
        CREATED,
        None,
        UPDATED,
        rate_limit=5,
    )
    assert transfer._key_line(key, bytes(range(32))) == (
        '{"apiKey":{"id":"5d2f3bf6-7c3a-4a7b-8c6e-2f2e8b5d0f4c","tenant":"acme",'
        '"keyId":"key_0123456789abcdef","name":"staging","secretHash":'
        '"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",'
        '"createdAt":"2026-11-22T11:24:03.116Z","lastUsedAt":null,'
        '"revokedAt":"2026-11-22T11:25:03.116Z","rateLimit":5,"concurrencyLimit":null,'
        '"rateCeiling":null,"concurrencyCeiling":null}}\n'
    )
