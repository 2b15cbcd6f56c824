"""The costliest filtered calls the documented limits allow, on both stores.

A filter costs per memory what its conditions are (never more than its
operands' size, whatever the metadata), and its one cost that grows with
the data, reading the stored metadata, is bounded per call by
``MEMSVC_MAX_FILTER_SCAN_BYTES`` (32 MiB). This measures what that bound
buys: a user whose memories each carry 64 KiB of metadata (the limit) of
the shape costliest to parse, a filter of 32 conditions (the limit) on deep
keys that no memory matches, so every memory is read:

  listing, just under the bound    memory.getAll over 31 MiB of metadata: its
                                   answer is empty, every text was read (31
                                   conditions every memory passes, then one
                                   none does)
  listing, past the bound          the same over 40 MiB: 400 once 32 MiB are read
  search, first with the filter    a cached user's columns built over 31 MiB
  search, after                    the same search again (the columns kept)
  search through the store         no cache: the store's KNN, widened to the
                                   whole user, then its columns
  typical user (2,000 memories)    the same listing over small metadata

Each call in-process through the service, median of 5 (the first search
alone), its CPU time (this thread's), on SQLite and on PostgreSQL (the
tests' private server).

    python -m bench.filter_costs [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import typing as t
import uuid

import numpy as np

from bench.report import recording
from memsvc.errors import BadRequest
from memsvc.models import Memory
from memsvc.search import SearchCache
from memsvc.search import filters
from memsvc.services import memories
from memsvc.store import FullStore
from memsvc.store import SqliteStore
from memsvc.store import connect
from tests.support.helpers import HashEmbedder

DIMS = 384
BUDGET = 32 * 2**20
METADATA = 65_536  # the documented limit, as compact JSON


def shapes() -> dict[str, t.Callable[[int], t.Any]]:
    """Metadata of about 64 KiB, each of one shape; each memory's its own (an ``id``)."""
    return {
        "nested objects, 30 deep": _nested,
        "an array of numbers": lambda seed: _own(seed, {"a": list(range(10_000, 20_800))}),
        "an array of empty arrays": lambda seed: _own(seed, {"a": [[]] * 21_700}),
        "many short keys": lambda seed: _own(seed, {f"k{i}": i % 10 for i in range(6_660)}),
        "short strings": lambda seed: _own(seed, {"a": [f"s{i}" for i in range(8_300)]}),
    }


def _own(seed: int, metadata: dict[str, t.Any]) -> dict[str, t.Any]:
    return {"id": f"{seed:06d}", **metadata}


def _nested(seed: int) -> dict[str, t.Any]:
    node: dict[str, t.Any] = {"leaf": seed}
    for level in range(29):
        node = {**{f"k{i}": [i, {"x": f"{level:02d}"}] for i in range(102)}, "n": node}
    return _own(seed, {"a": node})


def costliest() -> tuple[str, t.Callable[[int], t.Any]]:
    """The shape whose JSON takes longest to parse per byte, within the limit."""
    timings = {}
    for name, make in shapes().items():
        text = json.dumps(make(0), separators=(",", ":"))
        assert len(text) <= METADATA, (name, len(text))
        best = min(_parse_time(text) for _ in range(5))
        timings[name] = best / len(text)
    name = max(timings, key=lambda n: timings[n])
    for shape, per_byte in timings.items():
        print(f"  {shape:<28} {per_byte * 1e9:6.1f} ns per byte to parse")
    return name, shapes()[name]


def _parse_time(text: str) -> float:
    started = time.perf_counter()
    json.loads(text)
    return time.perf_counter() - started


def fill(store: FullStore, user: str, count: int, make: t.Callable[[int], t.Any]) -> int:
    """``count`` memories with metadata from ``make``; returns their metadata's bytes."""
    embedder = HashEmbedder(DIMS)
    total = 0
    for start in range(0, count, 50):
        part = [
            Memory(str(uuid.uuid4()), "bench", user, f"memory {i}", make(i), i + 1, i + 1)
            for i in range(start, min(start + 50, count))
        ]
        sizes = [len(json.dumps(m.metadata, separators=(",", ":"))) for m in part]
        assert max(sizes) <= METADATA, max(sizes)  # within the documented limit
        total += sum(sizes)
        with store.write():
            store.insert_memories(part, embedder.embed([m.content for m in part]))
    return total


#: 32 conditions (the limit): 31 that every memory passes, then one none does.
FILTER = filters.parse({**{f"z{i}": {"exists": False} for i in range(31)}, "zz": {"exists": True}})


def timed(call: t.Callable[[], t.Any], runs: int) -> tuple[float, float, str]:
    """Median wall and CPU seconds of ``call``, and what it answered."""
    walls, cpus, answer = [], [], ""
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            found = call()
            answer = f"{len(found)} found"
        except BadRequest:
            answer = "400"
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), answer


def measure(store: FullStore, make: t.Callable[[int], t.Any], runs: int) -> list[tuple]:
    per = len(json.dumps(make(0), separators=(",", ":")))
    under = fill(store, "under", BUDGET // per - 2, make)
    over = fill(store, "over", BUDGET * 5 // 4 // per, make)
    fill(store, "typical", 2000, lambda i: {"kind": f"k{i % 7}", "n": i, "tags": ["a", str(i % 3)]})
    embedder = HashEmbedder(DIMS)

    def listing(user: str) -> t.Callable[[], t.Any]:
        return lambda: memories.get_all(store, "bench", user, 1000, filter=FILTER)

    def search(user: str, cache: SearchCache | None) -> t.Callable[[], t.Any]:
        return lambda: memories.search(
            store, embedder, "bench", user, "memory", 10, 0.0, cache, filter=FILTER
        )

    rows = [
        ("listing, just under the bound", under, timed(listing("under"), runs)),
        ("listing, past the bound", over, timed(listing("over"), runs)),
    ]
    cache = SearchCache(1024 * 2**20, DIMS)
    memories.search(store, embedder, "bench", "under", "memory", 10, 0.0, cache)  # loaded
    rows.append(("search, first with the filter", under, timed(search("under", cache), 1)))
    rows.append(("search, after", under, timed(search("under", cache), runs)))
    rows.append(("search through the store", under, timed(search("under", None), runs)))
    rows.append(("typical user (2,000 memories)", 0, timed(listing("typical"), runs)))
    return rows


def open_store(tmp: str, postgres: bool) -> FullStore:
    if postgres:
        from tests.support import postgres as pg
        from tests.support.stores import open_store as open_url

        store = open_url(pg.fresh_database("bench_filter_costs"))
    else:
        store = SqliteStore(connect(f"{tmp}/bench.sqlite3"))
    store.migrate(HashEmbedder(DIMS).model_id, DIMS)
    return store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print("metadata shapes of 64 KiB (the limit):")
    name, make = costliest()
    print(f"every memory below: 64 KiB of {name}; a filter of 32 conditions no memory matches")
    print(f"the bound: MEMSVC_MAX_FILTER_SCAN_BYTES = {BUDGET:,} bytes (32 MiB) per call")
    print()
    print(f"{'store':<12}{'call':<34}{'metadata MiB':>13}{'wall ms':>9}{'cpu ms':>9}  answer")
    for kind in ("SQLite", "PostgreSQL"):
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(tmp, kind == "PostgreSQL")
            try:
                for call, size, (wall, cpu, answer) in measure(store, make, args.runs):
                    mib = f"{size / 2**20:.1f}" if size else "-"
                    print(f"{kind:<12}{call:<34}{mib:>13}{wall * 1000:>9.0f}"
                          f"{cpu * 1000:>9.0f}  {answer}")  # fmt: skip
            finally:
                t.cast(t.Any, store).conn.close()


if __name__ == "__main__":
    np.seterr(all="ignore")
    with recording("filter_costs"):
        main()
