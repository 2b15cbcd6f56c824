"""What operations.md's erasure procedure costs on PostgreSQL, by the size of the tables.

For each size N: a fresh database on the tests' private PostgreSQL 16 (on
tmpfs, without fsync: the database's own work is timed, not a disk's)
holds N memories of 384 dimensions (the bundled model's) with short texts
and small metadata over N / 100 users, and one earlier version for every
fifth memory; ``ANALYZE`` runs (as autovacuum would), one user's memories
are erased (``memsvc.services.memories.delete_all``), and then the two
statements of the procedure run, each timed:

  VACUUM (FULL, ANALYZE) memories, memory_history, memory_vectors,
                         memory_terms, memory_users
  VACUUM FULL pg_statistic

Printed: each statement's time, the tables' size (what the first rewrites),
and the time per MB of tables, as a ratio to a plain ``ANALYZE`` of the same
tables measured in the same run (the statistics part alone).

    python -m bench.pg_erasure [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import numpy as np

from bench.report import recording
from memsvc import clock
from memsvc.models import Memory
from memsvc.models import Version
from memsvc.services import memories
from memsvc.store.postgres import PgStore
from memsvc.store.postgres.connection import PgDatabase
from tests.support import postgres

DIMS = 384
TABLES = "memories, memory_history, memory_vectors, memory_terms, memory_users"
BATCH = 2_000


def build(store: PgStore, n: int, rng: np.random.Generator) -> None:
    now = clock.now_ms()
    for start in range(0, n, BATCH):
        count = min(BATCH, n - start)
        batch = [
            Memory(
                str(uuid.uuid4()),
                "bench",
                f"user-{(start + i) % max(1, n // 100)}@example.org",
                f"memory {start + i} about topic {(start + i) % 37} and order {rng.integers(1e6)}",
                {"topic": int((start + i) % 37), "tag": f"t{(start + i) % 11}"},
                now + start + i,
                now + start + i,
            )
            for i in range(count)
        ]
        vectors = rng.standard_normal((count, DIMS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1)[:, None]
        with store.write():
            seqs = store.insert_memories(batch, vectors)
            for seq, memory in list(zip(seqs, batch, strict=True))[::5]:
                earlier = Version(1, memory.content + " (first)", {}, "add", memory.created_at)
                store.insert_versions(seq, [earlier])


def timed(store: PgStore, statement: str) -> float:
    started = time.perf_counter()
    store.conn.execute(statement)
    return time.perf_counter() - started


def run(n: int) -> tuple:
    url = postgres.fresh_database(f"bench_erasure_{n}")
    store = PgStore(PgDatabase(url, max_size=1).connect())
    try:
        store.conn.autocommit = True
        store.migrate("bench:random", DIMS)
        build(store, n, np.random.default_rng(n))
        store.conn.execute(f"ANALYZE {TABLES}")
        erased = memories.delete_all(store, "bench", "user-0@example.org")
        (size,) = store.conn.execute(
            "SELECT sum(pg_total_relation_size(c)) FROM unnest(%s::regclass[]) AS c",
            ([t.strip() for t in TABLES.split(",")],),
        ).fetchone()
        analyze = timed(store, f"ANALYZE {TABLES}")
        full = timed(store, f"VACUUM (FULL, ANALYZE) {TABLES}")
        statistics = timed(store, "VACUUM FULL pg_statistic")
        return n, erased, float(size) / 1e6, analyze, full, statistics
    finally:
        store.conn.close()
        postgres.drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        print(f"N={n:,}: building...", file=sys.stderr, flush=True)
        rows.append(run(n))
    print(f"{'memories':>10} {'erased':>7} {'tables MB':>10} {'ANALYZE':>9} "
          f"{'VACUUM (FULL, ANALYZE)':>23} {'ratio':>6} {'VACUUM FULL pg_statistic':>25} "
          f"{'s per 100 MB':>13}")  # fmt: skip
    for n, erased, mb, analyze, full, statistics in rows:
        print(
            f"{n:>10,} {erased:>7,} {mb:>10,.1f} {analyze * 1000:>7.0f}ms "
            f"{full * 1000:>21.0f}ms {full / analyze:>5.1f}x {statistics * 1000:>23.1f}ms "
            f"{(full + statistics) / mb * 100:>12.2f}s"
        )


if __name__ == "__main__":
    with recording("pg_erasure"):
        main()
