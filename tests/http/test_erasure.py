"""Erasure really erases: after delete or deleteAll the text, and the end user's id once
their last memory goes, are in no answer, no cache and no byte of the database file or
its WAL."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from memsvc.api.context import runtime
from memsvc.models import Memory
from tests.support.helpers import assert_error
from tests.support.helpers import data
from tests.support.helpers import maintenance_round
from tests.support.helpers import mutate
from tests.support.helpers import on_disk
from tests.support.helpers import query

MARKER = "zqxerasemarker7734"
META_MARKER = "metamarker5521vq"
LIVE_MARKER = "livemarker9081kw"  # in the text at the time of the erasure
# User ids are often e-mail addresses: erasing the user erases the id.
VICTIM = "jane.doe+erasure7f3@example.org"


def crowd(app, n: int) -> None:
    """``n`` memories of another user, so that the victim is a small share of the index."""
    with app.app_context():
        rt = runtime()
        store = rt.store()
        memories = [
            Memory(
                str(uuid.uuid4()),
                "tenant-A",
                "crowd",
                f"crowd memory {i} about topic {i % 17}",
                {},
                i,
                i,
            )
            for i in range(n)
        ]
        vectors = np.ones((n, rt.embedder.dimensions), dtype=np.float32)
        with store.write():
            store.insert_memories(memories, vectors / np.linalg.norm(vectors, axis=1)[:, None])


# A deleteAll that is a large share of the keyword index merges the index (the
# test's small database); among a crowd it secure-deletes word by word.
@pytest.mark.parametrize("how", ["delete", "deleteAll", "deleteAll among a crowd"])
def test_erased_text_leaves_no_trace_in_the_database_files(app, client, auth, db_path, how):
    if how == "deleteAll among a crowd":
        crowd(app, 400)
    keep = data(mutate(client, "memory.add", {"userId": "u", "content": "keep me"}, headers=auth))
    m = data(
        mutate(
            client,
            "memory.add",
            {
                "userId": VICTIM,
                "content": f"My locker code is {MARKER} do not share",
                "metadata": {"note": META_MARKER},
            },
            headers=auth,
        )
    )
    # An update: the marker now lives in the memory's history too.
    mutate(
        client,
        "memory.update",
        {"id": m["id"], "content": f"nothing to see {LIVE_MARKER}"},
        headers=auth,
    )
    query(client, "memory.search", {"userId": VICTIM, "query": "locker"}, headers=auth)
    maintenance_round(app)
    before = on_disk(db_path)
    markers = [x.encode() for x in (MARKER, META_MARKER, LIVE_MARKER, VICTIM)]
    assert all(x in before for x in markers)  # the test can fail

    if how == "delete":
        data(mutate(client, "memory.delete", {"id": m["id"]}, headers=auth))
    else:
        done = data(mutate(client, "memory.deleteAll", {"userId": VICTIM}, headers=auth))
        assert done == {"success": True, "deleted": 1}
    maintenance_round(app)
    with app.app_context():  # the file is whole after either way
        conn = runtime().store().conn
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]

    after = on_disk(db_path)
    assert [x for x in markers if x in after] == []
    for proc, body in (("memory.getById", {"id": m["id"]}), ("memory.history", {"id": m["id"]})):
        assert_error(query(client, proc, body, headers=auth), 404, "NOT_FOUND", proc)
    for mode in ("semantic", "keyword", "hybrid"):
        for mode_query in ("locker", MARKER, LIVE_MARKER):
            found = data(
                query(
                    client,
                    "memory.search",
                    {"userId": VICTIM, "query": mode_query, "threshold": 0, "mode": mode},
                    headers=auth,
                )
            )
            assert found == []
    with app.app_context():
        assert ("tenant-A", VICTIM) not in runtime().search_cache._entries
        assert runtime().store().user_state("tenant-A", VICTIM) is None
    assert data(query(client, "memory.getById", {"id": keep["id"]}, headers=auth)) == keep
