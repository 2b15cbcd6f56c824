"""The Python client's Memory has the fields the OpenAPI document gives a memory.

clients/python writes its model by hand. These tests fail when a field is
added to the server's Memory or SearchResult, removed from it, or made
optional or required there, and the client's Memory does not follow.
"""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
from memsvc_client.models import Memory as ClientMemory

from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

pytestmark = pytest.mark.stores("sqlite")

#: Wire fields the client's Memory leaves out on purpose, and why.
LEFT_OUT = {
    # A client holds one tenant's API key: every memory it reads is that tenant's.
    "idpUserId": "the tenant, the same for every memory a client sees",
}


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def client_fields() -> dict[str, bool]:
    """The client Memory's fields, each with whether it is required."""
    return {
        f.name: f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        for f in dataclasses.fields(ClientMemory)
    }


def wire_fields(doc: dict) -> dict[str, bool]:
    """The document's memory fields, each with whether every memory has it.

    One client Memory stands for both components: a field only search results
    carry is one a Memory may lack.
    """
    schemas = doc["components"]["schemas"]
    memory, result = schemas["Memory"], schemas["SearchResult"]
    assert memory["properties"].keys() <= result["properties"].keys()
    return {name: name in memory.get("required", []) for name in result["properties"]}


@pytest.fixture
def doc(client):
    return client.get("/openapi.json").get_json()


def test_the_client_memory_has_the_documents_fields_with_their_optionality(doc):
    wire = wire_fields(doc)
    expected = {snake(name): required for name, required in wire.items() if name not in LEFT_OUT}
    assert client_fields() == expected, (
        "clients/python/memsvc_client/models.py's Memory differs from the OpenAPI document's "
        "Memory and SearchResult (field: required)"
    )


def test_the_fields_the_client_leaves_out_are_still_there_to_leave_out(doc):
    wire = wire_fields(doc)
    assert [name for name in LEFT_OUT if name not in wire] == []
    assert [name for name in LEFT_OUT if snake(name) in client_fields()] == []


def test_the_check_would_notice_a_new_field(doc):
    schemas = doc["components"]["schemas"]
    schemas["SearchResult"]["properties"]["rank"] = {"type": "integer"}
    assert "rank" not in client_fields()
    assert "rank" in {snake(name) for name in wire_fields(doc)}


def test_the_client_reads_and_writes_every_field_of_a_live_answer(client, auth):
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    memory = {"userId": "u", "content": "Bob runs marathons", "metadata": {"n": 1}}
    mutate(client, "memory.add", {**memory, "expiresAt": later}, headers=auth)
    search = {"userId": "u", "query": "marathons", "mode": "hybrid", "threshold": 0}
    found = data(query(client, "memory.search", {**search, "explain": True}, headers=auth))
    [item] = found
    assert {"expiresAt", "similarity", "matchedBy", "explain"} <= item.keys()
    wire = {name: value for name, value in item.items() if name not in LEFT_OUT}
    assert ClientMemory.from_wire(item).to_dict() == wire
