import numpy as np
import pytest

from memsvc.embeddings import ProviderError
from memsvc.errors import NotFound
from memsvc.services import memories
from memsvc.services import reembedding
from tests.support.helpers import HashEmbedder
from tests.support.helpers import TableEmbedder


def count(store, table):
    return store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_add_stores_memory_and_vector(store, hash_embedder):
    m = memories.add(store, hash_embedder, "t1", "u1", "likes tea", {"a": 1})
    assert memories.get(store, "t1", m.id) == m
    assert m.created_at == m.updated_at
    assert count(store, "memory_vectors") == 1


class FailingEmbedder(HashEmbedder):
    def embed(self, texts):
        raise ProviderError("embedding provider failed: HTTP 503")


def test_add_stores_nothing_when_the_embedder_fails(store):
    with pytest.raises(ProviderError):
        memories.add(store, FailingEmbedder(16, "test:hash-16"), "t1", "u1", "x", {})
    assert count(store, "memories") == 0
    assert count(store, "memory_vectors") == 0
    assert not store.in_transaction()


def table_store(store, vectors, dims):
    """The test's blank store, made for a TableEmbedder."""
    embedder = TableEmbedder(vectors, dims)
    store.migrate(embedder.model_id, dims)
    return store, embedder


def test_search_applies_threshold_and_limit_and_orders_by_similarity(blank_store):
    # cos(query, m_i) is exactly the first coordinate of m_i.
    vectors = {
        "query": [1, 0],
        "0.95": [0.95, np.sqrt(1 - 0.95**2)],
        "0.80": [0.80, 0.60],
        "0.60": [0.60, 0.80],
        "opposite": [-1, 0],
    }
    store, emb = table_store(blank_store, vectors, 2)
    for text in ("0.60", "0.95", "opposite", "0.80"):
        memories.add(store, emb, "t1", "u1", text, {})

    def search(limit=10, threshold=0.7):
        return [
            (r.memory.content, round(r.similarity, 5))
            for r in memories.search(store, emb, "t1", "u1", "query", limit, threshold)
        ]

    assert search() == [("0.95", 0.95), ("0.80", 0.8)]
    assert search(limit=1) == [("0.95", 0.95)]
    # (0.8 itself is a coin toss: the stored float32 vector's cosine is
    # 0.8 +- 1e-8, as with any float arithmetic.)
    assert search(threshold=0.7999) == [("0.95", 0.95), ("0.80", 0.8)]
    assert search(threshold=0.81) == [("0.95", 0.95)]
    # A negative cosine reads as similarity 0, included only at threshold 0.
    assert search(threshold=0) == [("0.95", 0.95), ("0.80", 0.8), ("0.60", 0.6), ("opposite", 0)]
    assert search(threshold=1) == []
    store.conn.close()


def test_identical_memory_has_similarity_one(store, hash_embedder):
    memories.add(store, hash_embedder, "t1", "u1", "same words", {})
    [result] = memories.search(store, hash_embedder, "t1", "u1", "same words", 10, 0.99)
    assert result.similarity == pytest.approx(1.0, abs=1e-6)
    assert 0 <= result.similarity <= 1


def test_search_equals_brute_force(store, hash_embedder):
    texts = [f"memory number {i}" for i in range(200)]
    for text in texts:
        memories.add(store, hash_embedder, "t1", "u1", text, {})
    matrix = np.array([hash_embedder.embed([t])[0] for t in texts], dtype=np.float64)
    for q in ("alpha", "beta", "memory number 7"):
        qv = hash_embedder.embed([q])[0].astype(np.float64)
        sims = np.clip(matrix @ qv, 0, 1)
        expected = [texts[i] for i in np.argsort(-sims) if sims[i] >= 0.1][:10]
        got = memories.search(store, hash_embedder, "t1", "u1", q, 10, 0.1)
        assert [r.memory.content for r in got] == expected
        for r in got:
            assert r.similarity == pytest.approx(sims[texts.index(r.memory.content)], abs=1e-5)


def test_search_sees_only_the_callers_tenant_and_user(store, hash_embedder):
    memories.add(store, hash_embedder, "t2", "u1", "secret of t2", {})
    memories.add(store, hash_embedder, "t1", "u2", "secret of u2", {})
    assert memories.search(store, hash_embedder, "t1", "u1", "secret of t2", 10, 0) == []
    assert memories.search(store, hash_embedder, "t1", "u1", "secret of u2", 10, 0) == []


def test_get_and_delete_of_another_tenants_memory_are_not_found(store, hash_embedder):
    m = memories.add(store, hash_embedder, "t1", "u1", "x", {})
    with pytest.raises(NotFound, match="Memory not found"):
        memories.get(store, "t2", m.id)
    with pytest.raises(NotFound):
        memories.delete(store, "t2", m.id)
    assert memories.get(store, "t1", m.id) == m


def test_delete_is_permanent(store, hash_embedder):
    m = memories.add(store, hash_embedder, "t1", "u1", "x", {})
    memories.delete(store, "t1", m.id)
    with pytest.raises(NotFound):
        memories.get(store, "t1", m.id)
    with pytest.raises(NotFound):
        memories.delete(store, "t1", m.id)
    assert memories.search(store, hash_embedder, "t1", "u1", "x", 10, 0) == []


def test_reembed_switches_every_vector_to_the_new_model(store, hash_embedder):
    added = [memories.add(store, hash_embedder, "t1", f"u{i % 3}", f"m{i}", {}) for i in range(10)]
    memories.delete(store, "t1", added[4].id)
    new = HashEmbedder(24, "test:other-24")
    done = reembedding.reembed(store, new, batch_size=3)
    assert done == 9
    assert store.embedder() == ("test:other-24", 24)
    store.check_embedder("test:other-24", 24)
    [hit] = memories.search(store, new, "t1", "u2", "m5", 1, 0.99)
    assert hit.memory.id == added[5].id
    with pytest.raises(Exception, match="reembed_staging"):  # the staging table is gone
        count(store, "reembed_staging")
    store.reset()


class Interrupting(HashEmbedder):
    def __init__(self, *args, fail_after):
        super().__init__(*args)
        self.left = fail_after

    def embed(self, texts):
        if self.left == 0:
            raise KeyboardInterrupt
        self.left -= 1
        return super().embed(texts)


def test_reembed_resumes_after_an_interruption(store, hash_embedder):
    for i in range(10):
        memories.add(store, hash_embedder, "t1", "u1", f"m{i}", {})
    with pytest.raises(KeyboardInterrupt):
        reembedding.reembed(store, Interrupting(24, "test:other-24", fail_after=2), batch_size=3)
    # The old vectors still serve until the switch.
    assert store.embedder() == ("test:hash-16", 16)
    assert len(memories.search(store, hash_embedder, "t1", "u1", "m3", 10, 0)) == 10
    done = reembedding.reembed(store, HashEmbedder(24, "test:other-24"), batch_size=3)
    assert done == 4  # the 6 staged before the interruption are kept
    assert store.embedder() == ("test:other-24", 24)
    assert len(memories.search(store, HashEmbedder(24), "t1", "u1", "m3", 10, 0)) == 10
