"""What ``memsvc import`` costs on SQLite, and how much of it is the keyword index.

A file of ``--memories`` memories (200,000: 2,000 new users of 100, their
memories interleaved at random as an export of a live database has them,
format 3, vectors in the file) is imported as ``memsvc import`` does it
(:func:`memsvc.services.transfer.check`, then
:func:`~memsvc.services.transfer.import_`, in its transactions) into

  (a) an empty database, and
  (b) a database already holding ``--base`` memories (1,000,000: 10,000
      users of 100, built with the stores' ``insert_memories`` 1,000 per
      transaction and kept in ``--dir`` for the next run).

Texts and vectors are :mod:`bench.keyword_scale`'s (15-40 words with Zipf
frequencies, names and codes; 384-d unit vectors); one memory in 20 has an
earlier version. The database is opened as memsvc opens it (WAL,
``synchronous = FULL``, a 1 GB memory map).

Each import goes into a fresh copy of its target, twice: once as memsvc
does it, and once with the keyword index switched off (the store's
``_index`` does nothing), the in-run baseline of the same inserts without
the index. A third copy takes the floor of the store path: the same rows
of ``memories``, ``memory_vectors`` and ``memory_terms``, built beforehand
(the file read, every text's terms found, no time counted), written with
the store's own statements by ``executemany`` alone in the same
transactions of the same size. Printed per target: memories/s of
``import_`` (what the requirement counts), of the check and the import
together (what the command takes), the ratio of the two imports, which is
what the index costs, and the import's rate as a share of the floor's, how
close the import comes to what SQLite itself takes for its rows: the
machine is shared, so compare ratios across runs, not rates.

    python -m bench.import_speed [--memories 200000] [--base 1000000] [--dir DIR]
                                 [--profile]

``--quick`` is 20,000 memories into 0 and 100,000. ``--profile`` then
imports into the larger database once more under cProfile and prints its
25 costliest functions (cumulative) on stderr.
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
import typing as t
import uuid

# As memsvc runs (memsvc/__init__.py): one BLAS thread, set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench import keyword_scale as ks  # noqa: E402
from bench.report import recording  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc import settings  # noqa: E402
from memsvc import terms  # noqa: E402
from memsvc.embeddings import Embedder  # noqa: E402
from memsvc.models import dedupe_key  # noqa: E402
from memsvc.services import transfer  # noqa: E402
from memsvc.services.import_lines import MemoryLine  # noqa: E402
from memsvc.services.import_lines import read_line  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import connect  # noqa: E402
from memsvc.store import postings  # noqa: E402
from memsvc.store.base import MEMORY_COLUMNS  # noqa: E402
from memsvc.store.base import MEMORY_WIDTH  # noqa: E402
from memsvc.store.sql.memory_sql import record_values  # noqa: E402

MMAP_MB = 1024  # memsvc's default MEMSVC_SQLITE_MMAP_MB
IMPORTED_TENANT = "moved"


class Fixed(Embedder):
    """The file's model: import never embeds."""

    model_id = "bench:random"
    dimensions = ks.DIMS

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:  # pragma: no cover
        raise AssertionError("import should not embed")

    def warm_up(self) -> None:
        pass


class Unindexed(SqliteStore):
    """The same store with the keyword index switched off: the baseline."""

    def _index(self, memories: t.Iterable[tuple[int, int, str]]) -> None:
        return None


def open_store(path: str, kind: type[SqliteStore] = SqliteStore) -> SqliteStore:
    store = kind(connect(path, mmap_mb=MMAP_MB))
    store.migrate(Fixed.model_id, ks.DIMS)
    return store


def write_file(path: str, memories: int, first_user: int) -> int:
    """The export file: ``memories`` of new users from ``first_user`` on; its size in bytes."""
    words, space = ks.Vocabulary(), ks.Space()
    rng = np.random.default_rng(7)
    users = memories // ks.PER_USER
    owners = np.repeat(np.arange(first_user, first_user + users), ks.PER_USER)
    rng.shuffle(owners)
    people = {n: ks.user(words, n) for n in range(first_user, first_user + users)}
    count: collections.Counter[int] = collections.Counter()
    base_time = 1_750_000_000_000
    with open(path, "w", encoding="utf-8") as out:
        header = {
            "format": transfer.FORMAT, "version": transfer.FORMAT_VERSION,
            "model": Fixed.model_id, "dimensions": ks.DIMS, "exportedAt": clock.iso(base_time),
            "tenant": IMPORTED_TENANT, "userId": None, "memories": len(owners), "apiKeys": 0,
        }  # fmt: skip
        out.write(json.dumps(header) + "\n")
        for start in range(0, len(owners), 1000):
            batch = owners[start : start + 1000].tolist()
            vectors = space.draw(rng, np.array([people[n].topics[0] for n in batch]))
            for offset, n in enumerate(batch):
                i = count[n]
                count[n] += 1
                at = clock.iso(base_time + start + offset)
                content = ks.memory_text(words, people[n], i)
                record: dict[str, t.Any] = {
                    "id": str(uuid.UUID(int=int(rng.integers(2**62)) << 64 | start + offset)),
                    "tenant": IMPORTED_TENANT, "userId": people[n].id, "content": content,
                    "metadata": {"source": "chat"} if i % 3 else {},
                    "createdAt": at, "updatedAt": at, "expiresAt": None, "version": 1,
                    "history": [],
                }  # fmt: skip
                if i % 20 == 7:
                    record["version"] = 2
                    record["history"] = [
                        {"version": 1, "content": content.lower(), "metadata": {},
                         "event": "add", "at": at}
                    ]  # fmt: skip
                record["vectors"] = [base64.b64encode(vectors[offset].tobytes()).decode()]
                out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    return os.path.getsize(path)


def base_database(folder: str, size: int) -> tuple[str, float | None]:
    """A database of ``size`` memories in ``folder``, built unless it is there already."""
    path = os.path.join(folder, f"import-base-{size}.sqlite3")
    if os.path.exists(path):
        return path, None
    building = path + ".building"
    for leftover in (building, building + "-wal", building + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)
    store = open_store(building)
    started = time.perf_counter()
    if size:
        ks.grow(store, ks.Vocabulary(), ks.Space(), 0, size // ks.PER_USER)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.conn.close()
    os.replace(building, path)
    return path, time.perf_counter() - started


def copy_of(path: str, to: str) -> str:
    for leftover in (to, to + "-wal", to + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)
    shutil.copyfile(path, to)
    return to


def run_import(
    target: str, file: str, kind: type[SqliteStore], profile: bool = False
) -> tuple[float, float, int, str]:
    """Check and import ``file`` into ``target``: seconds of each, memories imported, profile."""
    store = open_store(target, kind)
    limits = transfer.Rules.from_settings(settings.DEFAULTS, None)
    # Each import meets its words for the first time, as a memsvc import
    # process does: none stemmed by an earlier one of this run.
    terms._term.cache_clear()
    with open(file, encoding="utf-8") as f:
        started = time.perf_counter()
        checked = transfer.check(store, transfer.read_lines(f), limits)
        check_s = time.perf_counter() - started
        f.seek(0)
        profiler = cProfile.Profile() if profile else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        result = transfer.import_(store, Fixed(), transfer.read_lines(f), checked, limits)
        if profiler:
            profiler.disable()
        import_s = time.perf_counter() - started
    report = ""
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        report = text.getvalue()
    store.conn.close()
    return check_s, import_s, result.imported, report


def sql_alone(target: str, file: str, batch: int = transfer.IMPORT_BATCH) -> tuple[float, int]:
    """The floor: the import's rows of memories, vectors and terms written by executemany
    alone, ``batch`` a transaction; seconds of the writing, memories written.

    Everything else is done first and not counted: reading and checking
    the lines, finding each text's terms, building the rows. What this
    leaves out of the store's work (users' rows, earlier versions, the
    vector id counter) is a few statements a batch.
    """
    limits = transfer.Rules.from_settings(settings.DEFAULTS, None)
    with open(file, encoding="utf-8") as f:
        records = [
            r
            for number, line in enumerate(f, start=1)
            if number > 1 and isinstance(r := read_line(line, number, ks.DIMS, limits), MemoryLine)
        ]
    conn = connect(target, mmap_mb=MMAP_MB)
    store = SqliteStore(conn)
    store.migrate(Fixed.model_id, ks.DIMS)
    (seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()
    (vid,) = conn.execute("SELECT coalesce(max(first_vid + windows), 1) FROM memories").fetchone()
    (user_key,) = conn.execute("SELECT coalesce(max(user_key), 0) FROM memory_users").fetchone()
    keys: dict[tuple[str, str], int] = {}
    batches = []
    for start in range(0, len(records), batch):
        memories, vectors, indexed = [], [], []
        for r in records[start : start + batch]:
            m, seq = r.memory, seq + 1
            memories.append((seq, *record_values(m), vid, 1, dedupe_key(m.content, m.metadata)))
            assert r.vectors is not None and len(r.vectors) == 1
            vectors.append((vid, m.tenant, m.user_id, r.vectors[0].tobytes()))
            vid += 1
            key = keys.setdefault((m.tenant, m.user_id), user_key + len(keys) + 1)
            indexed.append((key, seq, m.content))
        vectors.sort(key=lambda row: (row[1], row[2]))  # by user, as the store writes them
        batches.append((memories, vectors, postings.of(indexed).rows))
    marks = ", ".join("?" * (MEMORY_WIDTH + 4))
    started = time.perf_counter()
    with store.loading():
        for memories, vectors, rows in batches:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                f"INSERT INTO memories (seq, {MEMORY_COLUMNS}, first_vid, windows, dedupe_key) "
                f"VALUES ({marks})",
                memories,
            )
            conn.executemany(
                "INSERT INTO memory_vectors (rowid, tenant, user_id, embedding) "
                "VALUES (?, ?, ?, ?)",
                vectors,
            )
            conn.executemany(postings.INSERT, rows)
            conn.execute("COMMIT")
    took = time.perf_counter() - started
    conn.close()
    return took, len(records)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=200_000)
    parser.add_argument("--base", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="where the base database is kept")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.memories, args.base = 20_000, 100_000
    folder = args.dir or os.path.join(tempfile.gettempdir(), "memsvc-bench-import")
    os.makedirs(folder, exist_ok=True)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        ks.progress(f"writing the file of {args.memories:,} memories")
        file = os.path.join(tmp, "export.jsonl")
        size = write_file(file, args.memories, first_user=args.base // ks.PER_USER)
        ks.progress(f"the database of {args.base:,} memories")
        base, built = base_database(folder, args.base)
        load = os.getloadavg()[0]
        print(
            f"memsvc import of {args.memories:,} memories ({size / 1e6:.0f} MB of JSON Lines, "
            f"{ks.DIMS}-d vectors from the file, {args.memories // ks.PER_USER:,} new users) "
            f"into SQLite, {transfer.IMPORT_BATCH:,} a transaction"
        )
        print(
            f"{'into':<22}{'keyword index':<15}{'import/s':>10}{'check+import/s':>16}"
            f"{'import s':>10}{'check s':>9}"
        )
        for into, source in (("an empty database", None), (f"{args.base:,} memories", base)):
            rates = {}
            for label, kind in (("yes", SqliteStore), ("no (baseline)", Unindexed)):
                target = os.path.join(tmp, "target.sqlite3")
                if source is None:
                    copy_of(os.devnull, target)
                else:
                    ks.progress(f"copying the database of {args.base:,}")
                    copy_of(source, target)
                ks.progress(f"importing into {into}, keyword index {label}")
                check_s, import_s, n, _ = run_import(target, file, kind)
                rates[label] = n / import_s
                print(
                    f"{into:<22}{label:<15}{n / import_s:>10,.0f}"
                    f"{n / (check_s + import_s):>16,.0f}{import_s:>10.1f}{check_s:>9.1f}"
                )
            print(
                f"{'':<22}{'ratio':<15}{rates['yes'] / rates['no (baseline)']:>10.2f}"
                "  (the import with the index as a share of the rate without)"
            )
            target = os.path.join(tmp, "target.sqlite3")
            copy_of(os.devnull if source is None else source, target)
            ks.progress(f"the same rows into {into} by executemany alone")
            floor_s, n = sql_alone(target, file)
            print(
                f"{'':<22}{'SQL alone':<15}{n / floor_s:>10,.0f}{'':>16}{floor_s:>10.1f}"
                "  (the same rows, executemany only)"
            )
            print(
                f"{'':<22}{'ratio':<15}{rates['yes'] / (n / floor_s):>10.2f}"
                "  (the import with the index as a share of SQL alone)"
            )
        built_text = f"built in {built:.0f} s" if built is not None else "built by an earlier run"
        print(
            f"the {args.base:,}-memory database: {os.path.getsize(base) / 1e9:.1f} GB, "
            f"{built_text}; load average {load:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end; the run took "
            f"{(time.perf_counter() - began) / 60:.1f} min"
        )
        if args.profile:
            ks.progress("importing once more, under cProfile")
            *_, report = run_import(
                copy_of(base, os.path.join(tmp, "target.sqlite3")), file, SqliteStore, profile=True
            )
            print(report, file=sys.stderr)


if __name__ == "__main__":
    with recording("import_speed"):
        main()
