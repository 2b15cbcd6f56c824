"""Whatever follows /trpc/ is a procedure path, answered by tRPC's own handling."""

from __future__ import annotations

import pytest

from tests.support.helpers import assert_error
from tests.support.helpers import assert_error_item


@pytest.mark.parametrize("path", ["memory.getAll%0A", "memory%0A.getAll", "a%0Ab%0D%0Ac"])
def test_a_procedure_path_with_a_newline_is_an_unknown_procedure(client, path):
    # Was Flask's 404 outside tRPC (no path; Werkzeug's path pattern stops at a newline).
    resp = client.get(f"/trpc/{path}")
    error = assert_error(resp, 404, "NOT_FOUND", path.replace("%0A", "\n").replace("%0D", "\r"))
    assert error["message"].startswith("No procedure found on path")


def test_a_batch_naming_such_a_procedure_answers_each_call(client, auth):
    resp = client.get(
        "/trpc/memory.getAll,memory.getAll%0A",
        query_string={"batch": "1", "input": '{"0":{"userId":"u"}}'},
        headers=auth,
    )
    assert resp.status_code == 207
    ok, missing = resp.get_json()
    assert ok == {"result": {"data": []}}
    assert_error_item(missing, 404, "NOT_FOUND", "memory.getAll\n")
