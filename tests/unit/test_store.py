import contextlib
import dataclasses
import os
import pathlib
import uuid

import numpy as np
import pytest

from memsvc import clock
from memsvc import search
from memsvc import terms
from memsvc.models import ApiKey
from memsvc.models import Memory
from memsvc.models import Version
from memsvc.services import memories
from memsvc.store import SCHEMA_VERSION
from memsvc.store import SqliteStore
from memsvc.store import StoreMismatch
from memsvc.store import connect
from memsvc.store.sql import SqlBulk
from tests.support.stores import sql
from tests.support.stores import tables_holding


def memory(tenant="t1", user="u1", content="text", created_at=1000, metadata=None):
    return Memory(
        id=str(uuid.uuid4()),
        tenant=tenant,
        user_id=user,
        content=content,
        metadata=metadata or {},
        created_at=created_at,
        updated_at=created_at,
    )


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def rand(dim=16, seed=0):
    return unit(np.random.default_rng(seed).standard_normal(dim))


def nearest(store, tenant, user, query, k, threshold):
    """The uncached search path over this store."""
    scope = search.Scope(clock.now_ms())
    found = search.search(
        store, None, search.SearchRequest(tenant, user, query, "", k, threshold, scope)
    )
    return [(r.memory, r.similarity) for r in found]


def add(store, m, vector):
    with store.write():
        store.insert_memories([m], [np.asarray(vector)[None, :]])
    return m


def get_memory(store, tenant, memory_id):
    return store.get_memory(tenant, memory_id, clock.now_ms())


def list_memories(store, tenant, user, limit):
    return [m for _, m in store.page(tenant, user, clock.now_ms())][:limit]


def count(store, table):
    return store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_migrate_creates_schema_in_wal_mode_and_records_the_embedder(store, store_kind):
    if store_kind == "sqlite":
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.embedder() == ("test:hash-16", 16)
    version = store.conn.execute(
        "SELECT value FROM memsvc_meta WHERE key = 'schema_version'"
    ).fetchone()[0]
    assert int(version) == SCHEMA_VERSION


def test_a_fresh_schema_is_whole_and_lists_every_part(store, store_kind):
    store.check_schema()
    found = store._schema_objects()
    assert store._OBJECTS <= found
    # Every part a migration makes is looked for: nothing of memsvc's is left out.
    if store_kind == "sqlite":
        made = {(k, n) for k, n in found if not n.startswith(("sqlite_autoindex", "sqlite_seq"))}
    else:  # the vector extension's own functions, and PL/pgSQL's, are not memsvc's
        made = {
            (k, n)
            for k, n in found
            if (k != "function" or n.startswith("memsvc_")) and (k, n) != ("extension", "plpgsql")
        }
    assert made == store._OBJECTS


@pytest.mark.parametrize("missing", ["table memory_vectors", "index memories_by_user"])
def test_a_schema_missing_a_part_is_refused_naming_it(store, store_kind, missing):
    from memsvc.store.schema import IncompleteSchema

    kind, name = missing.split()
    with store.write():
        store.conn.execute(f"DROP {kind.upper()} {name}")
    store.migrate("test:hash-16", 16)  # the version is current: nothing to do
    with pytest.raises(IncompleteSchema) as e:
        store.check_schema()
    assert (kind, name) in e.value.missing
    assert str(e.value).startswith(f"its schema is incomplete, missing {missing}")
    assert "\n" not in str(e.value)


def test_a_schema_4_database_upgrades_to_a_keyword_index_per_user(blank_store, store_kind):
    """Schema 5: users get keys and their texts' lengths, the index is rebuilt from the
    text, users left with no memories are forgotten."""
    from memsvc.store import schema

    store = blank_store
    saved = schema.SCHEMA_VERSION
    schema.SCHEMA_VERSION = 4  # both stores migrate up to the one shared version
    try:
        store.migrate("test:hash-16", 16)
    finally:
        schema.SCHEMA_VERSION = saved
    rows = [("u1", "Swimming in the lake before work"), ("u1", "Order 10482 came late")]
    rows += [("u2", "Another user's order 10482 swim")]
    with store.write():
        for vid, (user, content) in enumerate(rows, start=1):
            store.conn.execute(
                sql(
                    store,
                    "INSERT INTO memories (id, tenant, user_id, content, metadata, created_at, "
                    "updated_at, first_vid, windows) VALUES (?, 't1', ?, ?, '{}', ?, ?, ?, 1)",
                ),
                (str(uuid.uuid4()), user, content, 1000 + vid, 1000 + vid, vid),
            )
            vector = "[" + ",".join(str(x) for x in rand(seed=vid)) + "]"
            if store_kind == "sqlite":
                store.conn.execute(
                    "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) "
                    "VALUES (?, 't1', ?, vec_f32(?))",
                    (vid, user, vector),
                )
                store.conn.execute(
                    "INSERT INTO memory_fts (rowid, scope, content) VALUES (?, 'x', ?)",
                    (vid, content),
                )
            else:
                store.conn.execute(
                    "INSERT INTO memory_vectors (tenant, user_id, vid, embedding) "
                    "VALUES ('t1', %s, %s, %s::vector)",
                    (user, vid, vector),
                )
        for user, n, max_vid in (("u1", 2, 2), ("u2", 1, 3), ("erased", 0, 9)):
            store.conn.execute(
                sql(
                    store,
                    "INSERT INTO memory_users (tenant, user_id, count, max_vid, deletes, "
                    "updates, generation) VALUES ('t1', ?, ?, ?, 1, 0, 0)",
                ),
                (user, n, max_vid),
            )
    store.migrate("test:hash-16", 16)

    assert tables_holding(store, "erased") == []
    with store.read():
        u1, u2 = store.user_state("t1", "u1"), store.user_state("t1", "u2")
        assert u1 is not None and u2 is not None and u1.user_key != u2.user_key
        assert (u1.count, u1.terms, u2.terms) == (2, 8, 5)
        request = search.SearchRequest(
            "t1", "u1", rand(seed=1), "swims", 10, 0.0, search.Scope(clock.now_ms()), "keyword"
        )
        found = search.search(store, None, request)
    assert [r.memory.content for r in found] == [rows[0][1]]
    assert store.erasures() >= 0


def _schema_5_rows(monkeypatch) -> None:
    """Make the stores write memories as schema 5 had them (no conversation columns)."""
    from memsvc.store.sql import SqlStore
    from memsvc.store.sql import memory_sql as sql_module

    columns = "id, tenant, user_id, content, metadata, created_at, updated_at, expires_at, version"
    monkeypatch.setattr(sql_module, "MEMORY_COLUMNS", columns)
    monkeypatch.setattr(sql_module, "MEMORY_WIDTH", 9)
    real = sql_module.record_values
    monkeypatch.setattr(sql_module, "record_values", lambda m: real(m)[:9])
    monkeypatch.setattr(SqlStore, "_sessions_grew", lambda self, memories: None)


def test_a_schema_5_database_upgrades_to_vectors_with_their_floats(
    blank_store, store_kind, monkeypatch
):
    """Schema 6: PostgreSQL keeps each vector's float32s beside it, in its row; the
    vectors, the search and the user's load are the same after the upgrade."""
    from memsvc.store import schema

    store = blank_store
    with monkeypatch.context() as old:
        old.setattr(schema, "SCHEMA_VERSION", 5)
        _schema_5_rows(old)
        store.migrate("test:hash-16", 16)
        memories = [memory(user=f"u{i % 2}", created_at=1000 + i) for i in range(6)]
        vectors = np.stack([rand(seed=i) for i in range(6)])
        with store.write():
            store.insert_memories(memories, vectors)
    if store_kind == "postgres":
        columns = store.conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'memory_vectors'::regclass "
            "AND attname = 'floats'"
        ).fetchone()
        assert columns == (0,)
    store.migrate("test:hash-16", 16)
    store.check_schema()

    (version,) = store.conn.execute(
        "SELECT value FROM memsvc_meta WHERE key = 'schema_version'"
    ).fetchone()
    assert int(version) >= 6
    if store_kind == "postgres":
        (storage,) = store.conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memory_vectors'::regclass "
            "AND attname = 'floats'"
        ).fetchone()
        assert storage == "m"  # kept in the row
    for user in ("u0", "u1"):
        mine = [i for i in range(6) if memories[i].user_id == user]
        with store.read():
            vids = np.array([e.first_vid for e in store.entries("t1", user)])
            got = store.vectors("t1", user, vids, whole_user=True)
        assert np.array_equal(got, vectors[mine])
        by_id = store.vectors("t1", user, vids[[2, 0]])
        assert np.array_equal(by_id, vectors[[mine[2], mine[0]]])
        found = nearest(store, "t1", user, vectors[mine[1]], 3, 0.0)
        assert [m.id for m, _ in found][0] == memories[mine[1]].id
        cache = search.SearchCache(2**20, 16)
        scope = search.Scope(clock.now_ms())
        request = search.SearchRequest("t1", user, vectors[mine[1]], "", 3, 0.0, scope)
        warm = search.search(store, cache, request)
        assert [(r.memory.id, r.similarity) for r in warm] == [(m.id, s) for m, s in found]


def test_migrate_twice_changes_nothing(store):
    add(store, memory(), rand())
    store.migrate("test:hash-16", 16)
    assert count(store, "memories") == 1
    assert count(store, "memory_vectors") == 1


def test_an_existing_database_keeps_its_embedder_and_refuses_another(store):
    store.migrate("other:model", 32)
    assert store.embedder() == ("test:hash-16", 16)
    with pytest.raises(StoreMismatch, match="memsvc reembed") as e:
        store.check_embedder("other:model", 32)
    assert "test:hash-16 (16 dimensions)" in str(e.value)
    store.check_embedder("test:hash-16", 16)


def test_a_newer_schema_is_refused(store):
    with store.write():
        store.conn.execute("UPDATE memsvc_meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreMismatch, match="newer"):
        store.migrate("test:hash-16", 16)


def test_insert_and_get_round_trip(store):
    m = add(store, memory(metadata={"tags": ["a", "ü"], "n": 1.5, "deep": {"x": None}}), rand())
    assert get_memory(store, "t1", m.id) == m


def test_get_is_scoped_to_the_tenant(store):
    m = add(store, memory(tenant="t1"), rand())
    assert get_memory(store, "t2", m.id) is None


def test_insert_is_all_or_nothing(store):
    m = memory()
    wrong_dimensions = np.ones(3, dtype=np.float32)
    with pytest.raises(Exception, match="[Dd]imension"):
        add(store, m, wrong_dimensions)
    assert count(store, "memories") == 0
    assert count(store, "memory_vectors") == 0
    assert get_memory(store, "t1", m.id) is None


def test_list_is_newest_first_and_ties_go_to_the_later_insert(store):
    first = add(store, memory(created_at=5), rand(seed=1))
    second = add(store, memory(created_at=5), rand(seed=2))
    older = add(store, memory(created_at=1), rand(seed=3))
    newest = add(store, memory(created_at=9), rand(seed=4))
    ids = [m.id for m in list_memories(store, "t1", "u1", 10)]
    assert ids == [newest.id, second.id, first.id, older.id]
    assert [m.id for m in list_memories(store, "t1", "u1", 2)] == [newest.id, second.id]


def test_list_is_scoped_to_tenant_and_user(store):
    add(store, memory(tenant="t1", user="u1"), rand(seed=1))
    add(store, memory(tenant="t1", user="u2"), rand(seed=2))
    add(store, memory(tenant="t2", user="u1"), rand(seed=3))
    assert len(list_memories(store, "t1", "u1", 10)) == 1
    assert len(list_memories(store, "t1", "u2", 10)) == 1
    assert len(list_memories(store, "t2", "u1", 10)) == 1
    assert list_memories(store, "t2", "u2", 10) == []


def test_delete_removes_the_memory_and_its_vector(store):
    m = add(store, memory(), rand())
    keep = add(store, memory(), rand(seed=5))
    with store.write():
        assert store.delete_memory("t1", m.id)
    assert get_memory(store, "t1", m.id) is None
    assert count(store, "memory_vectors") == 1
    assert [x.id for x, _ in nearest(store, "t1", "u1", rand(), 10, 0)] == [keep.id]


def test_delete_of_another_tenants_memory_does_nothing(store):
    m = add(store, memory(tenant="t1"), rand())
    with store.write():
        assert not store.delete_memory("t2", m.id)
    assert get_memory(store, "t1", m.id) == m


def test_nearest_is_exact_and_ordered(store):
    rng = np.random.default_rng(7)
    vectors = [unit(v) for v in rng.standard_normal((300, 16))]
    mems = [add(store, memory(created_at=i), v) for i, v in enumerate(vectors)]
    query = unit(rng.standard_normal(16))
    expected = np.argsort(-(np.array(vectors, dtype=np.float64) @ query.astype(np.float64)))[:25]
    got = nearest(store, "t1", "u1", query, 25, 0)
    assert [m.id for m, _ in got] == [mems[i].id for i in expected]
    similarities = [s for _, s in got]
    assert similarities == sorted(similarities, reverse=True)
    for (_, s), i in zip(got, expected, strict=True):
        assert s == pytest.approx(max(0.0, float(vectors[i] @ query)), abs=1e-6)


def test_nearest_reads_only_that_users_vectors(store):
    target = rand(seed=1)
    add(store, memory(tenant="t1", user="u2"), target)
    add(store, memory(tenant="t2", user="u1"), target)
    mine = add(store, memory(tenant="t1", user="u1"), rand(seed=2))
    assert [m.id for m, _ in nearest(store, "t1", "u1", target, 10, 0)] == [mine.id]
    assert nearest(store, "t3", "u1", target, 10, 0) == []


def test_nearest_breaks_ties_across_the_cut_by_newest_first(store):
    same = rand(seed=3)
    tied = [add(store, memory(created_at=t), same) for t in (1, 3, 2, 5, 4)]
    got = nearest(store, "t1", "u1", same, 2, 0)
    assert [m.id for m, _ in got] == [tied[3].id, tied[4].id]


def key(tenant="t1", revoked_at=None):
    return ApiKey(
        id=str(uuid.uuid4()),
        tenant=tenant,
        key_id="key_" + uuid.uuid4().hex[:16],
        name="k",
        created_at=1,
        last_used_at=None,
        revoked_at=revoked_at,
    )


def test_keys_are_found_by_hash_and_listed_per_tenant(store):
    a, b, c = key("t1"), key("t1"), key("t2")
    with store.write():
        for k, h in ((a, b"a" * 32), (b, b"b" * 32), (c, b"c" * 32)):
            store.insert_key(k, h)
    assert store.key_by_hash(b"b" * 32) == b
    assert store.key_by_hash(b"x" * 32) is None
    assert store.list_keys("t1") == [a, b]
    assert store.list_keys(None) == [a, b, c]


def test_revoking_twice_keeps_the_first_time(store):
    k = key()
    with store.write():
        store.insert_key(k, b"h" * 32)
        store.revoke_key(k.id, 100)
        store.revoke_key(k.id, 200)
    assert store.get_key(k.id).revoked_at == 100


def test_ping_fails_when_the_file_is_gone(db_path):
    conn = connect(db_path)
    s = SqliteStore(conn)
    s.migrate("m", 4)
    s.ping()
    os.remove(db_path)
    with pytest.raises(OSError, match="no longer exists"):
        s.ping()
    conn.close()


def test_failed_write_leaves_no_transaction_open(store):
    with pytest.raises(RuntimeError):
        with store.write():
            store.insert_memories([memory()], [rand()[None, :]])
            raise RuntimeError("boom")
    assert not store.in_transaction()
    assert count(store, "memories") == 0


def test_a_rolled_back_erasure_leaves_the_user_and_the_keyword_index_whole(store):
    """deleteAll removes the user's row and index rows; a failed request puts all of it back."""
    memories = [memory(content=f"note {i} about gardening") for i in range(40)]
    for i, m in enumerate(memories):
        add(store, m, rand(seed=i))
    with store.read():
        state = store.user_state("t1", "u1")
        assert state is not None and state.count == 40
        before = sorted(store.postings(state.user_key, terms.query_terms("gardening")))
    assert len(before) == 40
    with pytest.raises(RuntimeError), store.write():
        assert store.delete_user("t1", "u1") == 40
        assert store.user_state("t1", "u1") is None
        raise RuntimeError("the request failed after the erasure")
    with store.read():
        assert store.user_state("t1", "u1") == state
        assert sorted(store.postings(state.user_key, terms.query_terms("gardening"))) == before
    with store.write():
        store.delete_user("t1", "u1")
    assert count(store, "memory_terms") == 0
    assert count(store, "memory_users") == 0


@pytest.mark.parametrize("how", ["delete", "deleteAll", "expiry"])
def test_a_user_whose_last_memory_goes_leaves_no_row_naming_them(store, how):
    """User ids are often e-mail addresses: erasing a user's last memory erases the id."""
    victim = "jane.doe+erasure@example.org"
    expires = 1 if how == "expiry" else None
    mine = [
        dataclasses.replace(memory(user=victim, content=f"fact {i}"), expires_at=expires)
        for i in range(3)
    ]
    for i, m in enumerate([*mine, memory(content="someone else's")]):
        add(store, m, rand(seed=i))
    assert "memory_users" in tables_holding(store, victim)  # the check can fail
    if how == "delete":
        for m in mine:
            with store.write():
                assert store.delete_memory("t1", m.id)
    elif how == "deleteAll":
        with store.write():
            assert store.delete_user("t1", victim) == 3
    else:
        assert memories.purge_expired(store) == 3
    assert tables_holding(store, victim) == []
    with store.read():
        assert store.user_state("t1", victim) is None
        assert store.user_state("t1", "u1") is not None
    # Back again, they are a new user: no counter of the old one carries over.
    add(store, memory(user=victim, content="a new start"), rand(seed=9))
    with store.read():
        state = store.user_state("t1", victim)
        assert state is not None and state.count == 1 and state.deletes == 0


# The statement docs/operations.md gives operators for erasure on PostgreSQL.
VACUUM_FULL = "VACUUM FULL memories, memory_history, memory_vectors, memory_terms, memory_users"


@pytest.mark.stores("postgres")
def test_postgresql_rewritten_as_the_docs_say_holds_no_byte_of_an_erased_user(store):
    victim, marker = "jane.doe+erasure@example.org", "zqxerasemarker7734"
    for i in range(3):
        add(store, memory(user=victim, content=f"my code is {marker} {i}"), rand(seed=i))
    for i in range(50):
        add(store, memory(content=f"someone else's fact {i}"), rand(seed=100 + i))
    with store.write():
        assert store.delete_user("t1", victim) == 3

    def files() -> bytes:
        store.conn.execute("CHECKPOINT")
        (data_dir,) = store.conn.execute("SHOW data_directory").fetchone()
        paths = store.conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class AS c "
            "WHERE c.relnamespace IN (current_schema()::regnamespace, 'pg_toast'::regnamespace) "
            "AND pg_relation_filepath(c.oid) IS NOT NULL"
        ).fetchall()
        return b"".join(
            pathlib.Path(data_dir, path).read_bytes()
            for (path,) in paths
            if pathlib.Path(data_dir, path).exists()
        )

    assert victim.encode() in files()  # deleted rows stay until vacuum: the check can fail
    store.conn.autocommit = True
    try:
        store.conn.execute(VACUUM_FULL)
    finally:
        store.conn.autocommit = False
    left = files()
    assert victim.encode() not in left and marker.encode() not in left
    assert b"someone else" in left


def test_export_reads_in_bulk_what_it_would_read_memory_by_memory(store):
    """``exported`` (one query per batch on PostgreSQL) equals the per-memory reads."""
    memories, vectors = [], []
    for i in range(30):
        m = memory(tenant=f"t{i % 2}", user=f"u{i % 3}", content=f"fact {i}", created_at=i)
        memories.append(m)
        vectors.append(np.stack([rand(seed=100 * i + w) for w in range(1 + i % 4)]))
    with store.write():
        seqs = store.insert_memories(memories, vectors)
        for seq, i in zip(seqs, range(0, 30, 4), strict=False):
            store.insert_versions(
                seq,
                [Version(1, f"old {i}", {"v": 1}, "add", 5), Version(2, "older", {}, "update", 6)],
            )
    with store.read():
        rows = list(store.all_memories(None, None, clock.now_ms()))
        bulk = store.exported(rows)
        one_by_one = SqlBulk.exported(store, rows)  # the shared one, memory by memory
    assert len(bulk) == len(one_by_one) == 30
    for (_, m, _, windows), (vs, hist), (vs1, hist1) in zip(rows, bulk, one_by_one, strict=True):
        assert vs.shape == (windows, 16)
        np.testing.assert_array_equal(vs, vs1)
        np.testing.assert_array_equal(vs, vectors[memories.index(m)])
        assert hist == hist1
    assert sum(len(h) for _, h in bulk) == 2 * len(range(0, 30, 4))


def test_a_users_vectors_come_in_blocks_as_they_are_read_whole(store, store_kind, monkeypatch):
    """``vector_blocks``: every vector once, at its position, a few rows at a time; errors told."""
    from memsvc.store.postgres import vector_copy
    from memsvc.store.sqlite import vec0

    monkeypatch.setattr(vec0, "BLOCK_BYTES", 20 * 16 * 4)  # 20 rows
    monkeypatch.setattr(vector_copy, "BLOCK_VECTORS", 3)  # blocks of 3 ids from PostgreSQL
    monkeypatch.setattr(vector_copy.VectorsHandedOn, "BLOCK_BYTES", 13 * 16 * 4)  # 13 rows on
    rng = np.random.default_rng(3)
    memories = [memory(user="u", content=f"fact {i}", created_at=i) for i in range(203)]
    vectors = [unit(rng.standard_normal((1 + i % 3, 16))) for i in range(203)]
    with store.write():
        store.insert_memories(memories, vectors)
        store.insert_memories([memory(user="other")], [rand(seed=9)[None, :]])
    with store.write():
        for m in memories[::7] + memories[-5:-1]:
            store.delete_memory("t1", m.id)
    # New vectors after the deletions (SQLite: in freed slots of the last chunk, out of order).
    with store.write():
        store.insert_memories(
            [memory(user="u", content="late")], [unit(rng.standard_normal((3, 16)))]
        )
    entries = store.entries("t1", "u")
    vids = np.concatenate([np.arange(e.first_vid, e.first_vid + e.windows) for e in entries])
    for in_transaction in (False, True):
        with store.read() if in_transaction else contextlib.nullcontext():
            whole = store.vectors("t1", "u", vids, whole_user=True)
            blocks = list(store.vector_blocks("t1", "u", vids))
        assert len(blocks) > 10
        at = np.concatenate([a for a, _ in blocks])
        assert sorted(at.tolist()) == list(range(len(vids)))
        got = np.zeros_like(whole)
        got[at] = np.concatenate([rows for _, rows in blocks])
        assert got.dtype == np.float32 and np.array_equal(got, whole)
    for wrong in (vids[:-1], vids[1:], np.r_[vids, vids[-1] + 1]):  # not all theirs, or more
        with store.read():
            with pytest.raises(RuntimeError, match="vectors"):
                list(store.vector_blocks("t1", "u", wrong))
    with store.read():
        assert list(store.vector_blocks("t1", "nobody", np.zeros(0, dtype=np.int64))) == []
        assert store.user_state("t1", "u") is not None  # the connection goes on


def test_a_schema_7_database_keeps_its_keys_limits_as_their_operators(blank_store, store_kind):
    """Schema 8: the operator's limits of a key apart from its tenant's; a key's limits from
    before are taken as the operator's, so no tenant gets more than it had."""
    from memsvc.store import schema

    store = blank_store
    saved = schema.SCHEMA_VERSION
    schema.SCHEMA_VERSION = 7
    try:
        store.migrate("test:hash-16", 16)
        p = "?" if store_kind == "sqlite" else "%s"
        with store.write():
            for n, (rate, concurrent) in enumerate([(10, 1), (None, None)]):
                store.conn.execute(
                    "INSERT INTO api_keys (id, tenant, key_id, name, secret_hash, created_at, "
                    f"rate_limit, concurrency_limit) VALUES ({p}, 't', {p}, 'k', {p}, 1, {p}, {p})",
                    (f"id{n}", f"key{n}", bytes([n]) * 32, rate, concurrent),
                )
    finally:
        schema.SCHEMA_VERSION = saved
    store.migrate("test:hash-16", 16)
    store.check_schema()
    throttled, plain = store.get_key("id0"), store.get_key("id1")
    assert throttled is not None and plain is not None
    assert (throttled.rate_ceiling, throttled.concurrency_ceiling) == (10, 1)
    assert (throttled.per_minute, throttled.concurrent) == (10, 1)
    assert (plain.rate_ceiling, plain.per_minute, plain.concurrent) == (None, None, None)
