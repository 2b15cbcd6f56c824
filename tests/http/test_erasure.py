"""Erasure really erases: after delete or deleteAll the text, and the end user's id once
their last memory goes, are in no answer, no cache and no byte of the database file or
its WAL."""

from __future__ import annotations

import os
import pathlib
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


def _snapshot_bytes(app) -> bytes:
    """Every byte of the app's snapshot files (temporary ones too)."""
    with app.app_context():
        folder = runtime().search_cache.files.path
    return b"".join(
        (pathlib.Path(folder) / name).read_bytes() for name in sorted(os.listdir(folder))
    )


@pytest.mark.parametrize("how", ["delete", "deleteAll"])
def test_erased_vectors_leave_no_snapshot_file_behind(configured, how):
    # Every user's vectors in a snapshot file shared by the workers.
    client, auth = configured(SEARCH_SHARED_MIN_KB=0)
    app = client.application
    for i in range(20):
        mutate(client, "memory.add", {"userId": VICTIM, "content": f"other fact {i}"}, headers=auth)
    m = data(
        mutate(client, "memory.add", {"userId": VICTIM, "content": f"code {MARKER}"}, headers=auth)
    )
    query(client, "memory.search", {"userId": VICTIM, "query": "code"}, headers=auth)
    with app.app_context():
        vector = runtime().embedder.embed([f"code {MARKER}"])[0].astype("<f4").tobytes()
        snap = runtime().search_cache._entries[("tenant-A", VICTIM)]
        assert snap.file is not None and snap.private_bytes < snap.file.nbytes
    assert vector in _snapshot_bytes(app)  # the test can fail

    if how == "delete":
        data(mutate(client, "memory.delete", {"id": m["id"]}, headers=auth))
        # At once: the next search does not find it, though the file still holds it.
        found = data(
            query(
                client,
                "memory.search",
                {"userId": VICTIM, "query": f"code {MARKER}", "threshold": 0, "limit": 50},
                headers=auth,
            )  # fmt: skip
        )
        assert m["id"] not in [f["id"] for f in found] and len(found) == 20
    else:
        data(mutate(client, "memory.deleteAll", {"userId": VICTIM}, headers=auth))
    maintenance_round(app)
    assert vector not in _snapshot_bytes(app)
    with app.app_context():
        files = runtime().search_cache.files.files()
    assert len(files) == (1 if how == "delete" else 0)
    if how == "delete":  # the rest is still found, from the rewritten file
        found = data(
            query(
                client,
                "memory.search",
                {"userId": VICTIM, "query": "other fact 3", "threshold": 0, "limit": 50},
                headers=auth,
            )  # fmt: skip
        )
        assert len(found) == 20 and found[0]["content"] == "other fact 3"


SESSION_MARKER = "sessmarker4471qz"
SPEAKER_MARKER = "Speakermarker Vq"
MESSAGE_ID_MARKER = "msgidmarker8830"


@pytest.mark.parametrize("how", ["deleteAll", "delete each message"])
def test_erased_conversations_leave_no_trace_in_the_database_files(app, client, auth, db_path, how):
    keep = data(mutate(client, "memory.add", {"userId": "u", "content": "keep me"}, headers=auth))
    out = data(
        mutate(
            client,
            "memory.ingest",
            {
                "userId": VICTIM,
                "sessionId": SESSION_MARKER,
                "messages": [
                    {"role": "user", "name": SPEAKER_MARKER, "id": MESSAGE_ID_MARKER,
                     "content": f"My locker code is {MARKER}, since yesterday",
                     "at": "2024-03-05T10:00:00Z"},
                    {"role": "assistant", "content": "Noted.", "id": "second"},
                ],
                "metadata": {"note": META_MARKER},
            },
            headers=auth,
        )
    )  # fmt: skip
    query(client, "memory.search", {"userId": VICTIM, "query": "locker"}, headers=auth)
    maintenance_round(app)
    markers = [x.encode() for x in (MARKER, META_MARKER, VICTIM, SESSION_MARKER, SPEAKER_MARKER)]
    markers.append(MESSAGE_ID_MARKER.encode())
    before = on_disk(db_path)
    assert all(x in before for x in markers)  # the test can fail

    if how == "deleteAll":
        done = data(mutate(client, "memory.deleteAll", {"userId": VICTIM}, headers=auth))
        assert done == {"success": True, "deleted": 2}
    else:
        for m in out["memories"]:
            data(mutate(client, "memory.delete", {"id": m["id"]}, headers=auth))
    maintenance_round(app)

    after = on_disk(db_path)
    assert [x for x in markers if x in after] == []
    assert data(query(client, "memory.sessions", {"userId": VICTIM}, headers=auth)) == []
    resp = query(
        client, "memory.session", {"userId": VICTIM, "sessionId": SESSION_MARKER}, headers=auth
    )
    assert_error(resp, 404, "NOT_FOUND", "memory.session")
    assert data(query(client, "memory.getById", {"id": keep["id"]}, headers=auth)) == keep
