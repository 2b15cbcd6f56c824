"""On-disk size of memsvc's database against the raw bytes it holds.

Two shapes of data, each in a fresh database file built through memsvc's own
Store (the schema and vec0 settings the service uses):

  many small users: 10,000 users holding 3 memories each
  one large user:   1 user holding 10,000 memories

Vectors are 1536-d float32 (OpenAI's text-embedding-3-small size), texts are
short sentences. "raw" is the vector bytes (1536 x 4 per memory) plus the
UTF-8 bytes of the texts. Targets: many small users < 3x raw, one large
user < 1.3x raw.

    python -m bench.storage [--dims 1536] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

import numpy as np

from bench.report import recording
from memsvc.models import Memory
from memsvc.store import SqliteStore
from memsvc.store import connect
from memsvc.store.sqlite.vec0 import CHUNK_SIZE as VECTOR_CHUNK_SIZE

WORDS = (
    "user prefers green tea lives in Lisbon works as a nurse has two cats allergic to "
    "peanuts likes hiking reads science fiction plays cello saving for a house"
).split()


def sentence(rng: np.random.Generator) -> str:
    return "User " + " ".join(rng.choice(WORDS, size=rng.integers(5, 12)))


def build(path: str, users: int, per_user: int, dims: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    conn = connect(path, synchronous="NORMAL")
    store = SqliteStore(conn)
    store.migrate("bench:random", dims)
    raw = 0
    started = time.perf_counter()
    batch = 1000
    total = users * per_user
    for start in range(0, total, batch):
        n = min(batch, total - start)
        vectors = rng.standard_normal((n, dims)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        memories = []
        for i in range(n):
            k = start + i
            # Interleaved, as memories of many users arrive in practice.
            user = k % users
            text = sentence(rng)
            raw += dims * 4 + len(text.encode())
            memories.append(
                Memory(
                    id=str(uuid.uuid4()),
                    tenant="tenant-0001",
                    user_id=f"user-{user:06d}",
                    content=text,
                    metadata={},
                    created_at=1_700_000_000_000 + k,
                    updated_at=1_700_000_000_000 + k,
                )
            )
        with store.write():
            store.insert_memories(memories, vectors)
    elapsed = time.perf_counter() - started
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = os.path.getsize(path) + (
        os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
    )
    return {"memories": total, "raw": raw, "size": size, "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", type=int, default=1536)
    parser.add_argument("--dir", default=None, help="where to build the databases")
    args = parser.parse_args()
    cases = [
        ("many small users (10,000 x 3)", 10_000, 3, 3.0),
        ("one large user (1 x 10,000)", 1, 10_000, 1.3),
    ]
    print(f"vec0 chunk_size={VECTOR_CHUNK_SIZE}, {args.dims} dimensions")
    header = ("memories", "raw MB", "file MB", "ratio", "target", "insert/s")
    print(
        f"{'case':<32}"
        + "".join(f"{h:>{w}}" for h, w in zip(header, (9, 9, 9, 7, 8, 10), strict=True))
    )
    failed = False
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name, users, per_user, target in cases:
            path = os.path.join(tmp, f"{users}x{per_user}.sqlite3")
            r = build(path, users, per_user, args.dims)
            ratio = r["size"] / r["raw"]
            ok = ratio < target
            failed |= not ok
            print(
                f"{name:<32}{r['memories']:>9}{r['raw'] / 1e6:>9.1f}{r['size'] / 1e6:>9.1f}"
                f"{ratio:>7.2f}{'<' + str(target):>8}{r['memories'] / r['seconds']:>10.0f}"
                f"  {'ok' if ok else 'OVER'}"
            )
            os.remove(path)
    # What vec0's default would need: every partition allocates 1024 slots.
    default = 10_000 * 1024 * args.dims * 4
    print(
        f"(vec0's default chunk_size=1024 would allocate {default / 1e9:.0f} GB for the first case)"
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    with recording("storage"):
        main()
