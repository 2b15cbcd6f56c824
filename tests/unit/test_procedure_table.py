"""docs/api.md lists the procedures as they are declared (make docs)."""

from __future__ import annotations

import pathlib
import re

from memsvc import generated_docs
from memsvc import wire
from memsvc.api import ROUTERS
from memsvc.api import inputs
from memsvc.api import outputs
from memsvc.api import procedure_table
from memsvc.api.procedures import Router
from memsvc.errors import NotFound

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def between_markers(text: str) -> str:
    return generated_docs.block(text, procedure_table.DOCS_START, procedure_table.DOCS_END)


def test_the_api_docs_table_is_what_the_declarations_say():
    assert between_markers(DOCS.read_text()).strip() == procedure_table.markdown().strip(), (
        "docs/api.md is out of date: run make docs"
    )


def test_every_procedure_has_its_own_section_in_the_api_docs():
    headings = set(re.findall(r"^## (\S+)$", DOCS.read_text(), re.M))
    procedures = [p for router in ROUTERS for p in router.procedures]
    assert [p for p in procedures if p not in headings] == []


def test_a_new_procedure_appears_in_the_table_with_what_it_declares():
    router = Router("things", __name__, description="Things.")

    @router.query("find", input=inputs.MemoryIdInput(), output=outputs.MEMORIES, errors=[NotFound])
    def find(call, params):
        return []

    table = procedure_table.markdown([router])
    assert (
        "| [things.find](#thingsfind) | query | none | `id`; optional: `userId` "
        "| list of `Memory` | 404 |"
    ) in table
    assert "Any call can also be answered 400, 413, 500 or 503, and any mutation 415" in table


def test_the_records_table_lists_the_memorys_fields_in_their_order():
    # The table's words are prose, but its fields are the declared ones.
    docs = DOCS.read_text()
    section = docs[docs.index("### Memory\n") : docs.index("### API key\n")]
    assert re.findall(r"^\| `(\w+)` \|", section, re.M) == [f.name for f in wire.MEMORY.fields]
