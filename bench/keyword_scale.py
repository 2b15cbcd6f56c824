"""Whether a search costs what the user has or what the database has: 50,000 against 1,000,000.

One database per store is built to 50,000 memories (500 users of 100),
copied as it is, then grown to 1,000,000 (10,000 users of 100); the copy
and the grown database are then searched side by side, taking turns search
by search, so that other work on the machine slows both sizes alike. The
figures to read are the ratios of the two. Both stores: SQLite (memory-
mapped as memsvc opens it) and PostgreSQL (the tests' PostgreSQL 16 with
pgvector, default settings, on a unix socket; the copy is a ``CREATE
DATABASE ... TEMPLATE``).

Workload (seeded). Every memory is 15-40 words: words drawn with Zipf
frequencies from a vocabulary of 6,000 (English function words at the
head, then made-up words), one to three words of the user's two topics
(300 topics of 12 words each), sometimes one of the user's names (from a
pool of 2,000 shared by all users) or codes ("INV-004217"). So a common
word's memories run to hundreds of thousands across the database. Vectors
are 384-d unit vectors around the user's topic: this is about cost, not
quality. Users' memories arrive interleaved, in random order, 1,000 per
transaction through the stores' ``insert_memories``; the 950,000 added
memories belong to 9,500 new users. PostgreSQL then gets
``refresh_statistics()`` (ANALYZE, as an import runs) and a VACUUM (what
autovacuum does within minutes, so that it does not run during the
measurements).

Queries are 2-6 words, six kinds: words of one of the user's memories;
common words; rare words; a name or code of the user's with common
words; words only other users have (another topic, another user's
number); and a mix of a common, a rare and a topic word. Each query's
vector is made beforehand: the timings are memsvc's search path
(:func:`memsvc.search.search`: its read transactions, the store's queries,
ranking), not a model. Limit 10, threshold 0 (every keyword match counts).

Each size has its own "workers" (a connection and a search cache of
256 MB, memsvc's default, each); the modes take turns query by query:

  warm            20 users, each searched twice in each mode first, then
                  12 queries each (240 per mode)
  service call    the same through ``memsvc.services.memories.search``,
                  with a query-embedding cache that holds every query
  first search    480 users not searched before, the same users and
                  queries at both sizes: one worker per mode, so each
                  search is its worker's first of that user (nothing of
                  the user in its search cache, connection or memory
                  map); the modes take turns at going first. The
                  database's pages are in the OS page cache.
  first search,   at 1M only: the same for 480 of the users added since
   new user       (their memories spread over the whole database),
                  compared with the 50k first searches

Printed: p50/p95 per store, search and size, the 1M/50k ratios, whether
every search answered the same at both sizes, build rates, bytes on disk
per memory (and the keyword index's share), and the run time.

    python -m bench.keyword_scale [--quick] [--stores sqlite,postgres]
                                  [--users 500,10000] [--dir DIR]

``--quick`` is 5,000 against 100,000 memories (50 and 1,000 users).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import itertools
import os
import random
import shutil
import sys
import tempfile
import time
import typing as t
import uuid

# As memsvc runs (memsvc/__init__.py): one BLAS thread, set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bench.report import recording  # noqa: E402
from memsvc import clock  # noqa: E402
from memsvc import terms  # noqa: E402
from memsvc.embeddings import Embedder  # noqa: E402
from memsvc.embeddings.cache import CachedEmbedder  # noqa: E402
from memsvc.models import Memory  # noqa: E402
from memsvc.search import MODES  # noqa: E402
from memsvc.search import Scope  # noqa: E402
from memsvc.search import SearchCache  # noqa: E402
from memsvc.search import SearchRequest  # noqa: E402
from memsvc.search import search  # noqa: E402
from memsvc.services import memories as service  # noqa: E402
from memsvc.store import SqliteStore  # noqa: E402
from memsvc.store import Store  # noqa: E402
from memsvc.store import connect  # noqa: E402

DIMS = 384
PER_USER = 100
BATCH = 1000
TENANT = "tenant"
LIMIT = 10
CACHE_BYTES = 256 * 2**20  # memsvc's default MEMSVC_SEARCH_CACHE_MB
MMAP_MB = 1024  # memsvc's default MEMSVC_SQLITE_MMAP_MB
STORES = ("sqlite", "postgres")
LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}

# -- the words ---------------------------------------------------------------------

#: The head of the Zipf distribution: English function words, as real texts have.
FUNCTION_WORDS = """the to and a of i in my is for it on that with was at this be have
    we me not but so about from are you just they had will an he she our all as by
    today also her his up out after like when get need said next been""".split()
GENERAL_WORDS = 6000
TOPICS = 300
TOPIC_WORDS = 12
NAMES = 2000
PREFIXES = ("INV", "PO", "TKT", "ACC", "REF", "ORD")
KINDS = ("own", "common", "rare", "name or code", "others only", "mixed")

_ONSETS = (
    "b c d f g h j k l m n p r s t v w z br cr dr fl gr pl pr st tr ch sh th bl gl sk sp"
).split()
_VOWELS = "a e i o u ai ea oo ou ie".split()
_CODAS = ["", "", "", "n", "r", "s", "l", "t", "m", "nd", "rk", "sh"]


def _made_up_words(count: int, seed: int, taken: set[str]) -> list[str]:
    """``count`` distinct pronounceable words of 2-3 syllables, none of them in ``taken``."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
            for _ in range(rng.choice((1, 2, 2, 2, 3)))
        )
        if word not in taken and word not in terms.STOPWORDS:
            taken.add(word)
            out.append(word)
    return out


class Vocabulary:
    """The words of every memory and query: general words by Zipf rank, topics, names."""

    def __init__(self) -> None:
        taken = set(FUNCTION_WORDS)
        self.general = FUNCTION_WORDS + _made_up_words(
            GENERAL_WORDS - len(FUNCTION_WORDS), 1, taken
        )
        self.zipf = list(itertools.accumulate(1 / (r + 1) for r in range(len(self.general))))
        words = _made_up_words(TOPICS * TOPIC_WORDS, 2, taken)
        self.topics = [words[i : i + TOPIC_WORDS] for i in range(0, len(words), TOPIC_WORDS)]
        self.names = [w.capitalize() for w in _made_up_words(NAMES, 3, taken)]
        #: Common content words (past the function words): long posting lists.
        self.common = self.general[len(FUNCTION_WORDS) : len(FUNCTION_WORDS) + 100]
        #: Rare words: a few memories in the whole database each.
        self.rare = self.general[3000:]


@dataclasses.dataclass(frozen=True)
class User:
    number: int
    topics: tuple[int, int]
    names: tuple[str, ...]
    codes: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"user-{self.number:05d}"


def user(words: Vocabulary, number: int) -> User:
    rng = random.Random(f"user/{number}")
    a, b = rng.sample(range(TOPICS), 2)
    return User(
        number,
        (a, b),
        tuple(rng.sample(words.names, 4)),
        tuple(f"{rng.choice(PREFIXES)}-{number:05d}{k}" for k in range(3)),
    )


def memory_text(words: Vocabulary, who: User, i: int) -> str:
    """Memory ``i`` of a user: 15-40 words."""
    rng = random.Random(f"{who.number}/{i}")
    length = rng.randint(15, 40)
    extra = [rng.choice(words.topics[rng.choice(who.topics)]) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.15:
        extra.append(rng.choice(who.names))
    if rng.random() < 0.08:
        extra.append(rng.choice(who.codes))
    out = rng.choices(words.general, cum_weights=words.zipf, k=length - len(extra))
    for word in extra:
        out.insert(rng.randrange(len(out) + 1), word)
    return " ".join(out).capitalize() + "."


def query_text(words: Vocabulary, who: User, j: int, users_at_start: int) -> tuple[str, str]:
    """Query ``j`` of a user, 2-6 words, and its kind (:data:`KINDS`, in turn)."""
    kind = KINDS[j % len(KINDS)]
    rng = random.Random(f"query/{who.number}/{j}")
    n = rng.randint(2, 6)
    if kind == "own":
        text = memory_text(words, who, rng.randrange(PER_USER)).rstrip(".").lower().split()
        content = [w for w in dict.fromkeys(text) if w not in terms.STOPWORDS]
        picked = rng.sample(content, min(len(content), max(2, n - 1)))
        out = picked + rng.sample(FUNCTION_WORDS[:10], max(0, n - len(picked)))
    elif kind == "common":
        out = rng.sample(words.common, n)
    elif kind == "rare":
        out = rng.sample(words.rare, n)
    elif kind == "name or code":
        out = [rng.choice(who.names + who.codes)] + rng.sample(words.common, n - 1)
    elif kind == "others only":
        topic = rng.choice([x for x in range(TOPICS) if x not in who.topics])
        other = user(words, rng.choice([u for u in range(users_at_start) if u != who.number]))
        # Another user's number: their code's digits (its prefix is everyone's).
        out = rng.sample(words.topics[topic], n - 1) + [rng.choice(other.codes).split("-")[1]]
    else:
        out = [
            rng.choice(words.common),
            rng.choice(words.rare),
            rng.choice(words.topics[rng.choice(who.topics)]),
        ] + rng.sample(FUNCTION_WORDS[:10], max(0, n - 3))
    rng.shuffle(out)
    return " ".join(out[:n]), kind


# -- the vectors -------------------------------------------------------------------


class Space:
    """384-d unit vectors: a shared direction, the user's topic, and noise.

    Cosines of a user's memories with the user's queries are about 0.5, with
    other users' about 0.3: every keyword match is above threshold 0.
    """

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        base = rng.standard_normal(DIMS)
        self.base = base / np.linalg.norm(base)
        centroids = rng.standard_normal((TOPICS, DIMS))
        self.centroids = centroids / np.linalg.norm(centroids, axis=1, keepdims=True)

    def draw(self, rng: np.random.Generator, topics: np.ndarray) -> np.ndarray:
        noise = rng.standard_normal((len(topics), DIMS)) * (1.2 / np.sqrt(DIMS))
        v = self.base + 0.8 * self.centroids[topics] + noise
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


# -- building ----------------------------------------------------------------------


def progress(message: str) -> None:
    """Where the run is, on stderr (not part of the recorded results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Built:
    memories: int
    seconds: float  # in the store: insert_memories and commits
    total: float  # wall time, making the texts and vectors included
    after: dict[str, float] = dataclasses.field(default_factory=dict)  # ANALYZE, VACUUM


def grow(store: Store, words: Vocabulary, space: Space, first: int, last: int) -> Built:
    """Add users ``first .. last - 1``, 100 memories each, interleaved at random."""
    started = time.perf_counter()
    rng = np.random.default_rng(first)
    owners = np.repeat(np.arange(first, last), PER_USER)
    rng.shuffle(owners)
    users = {n: user(words, n) for n in range(first, last)}
    count: collections.Counter[int] = collections.Counter()
    in_store = 0.0
    base_time = 1_700_000_000_000 + first * PER_USER
    for start in range(0, len(owners), BATCH):
        batch = owners[start : start + BATCH]
        memories = []
        for offset, n in enumerate(batch.tolist()):
            i = count[n]
            count[n] += 1
            at = base_time + start + offset
            memories.append(
                Memory(
                    str(uuid.uuid4()), TENANT, users[n].id,
                    memory_text(words, users[n], i), {}, at, at,
                )
            )  # fmt: skip
        vectors = space.draw(rng, np.array([users[n].topics[0] for n in batch.tolist()]))
        before = time.perf_counter()
        with store.write():
            store.insert_memories(memories, vectors)
        in_store += time.perf_counter() - before
        if start and start % 100_000 == 0:
            progress(f"  {first * PER_USER + start:,} memories")
    return Built(len(owners), in_store, time.perf_counter() - started)


def settle(store: Store, built: Built) -> None:
    """After a bulk build: statistics (an import's refresh), and on PostgreSQL a VACUUM."""
    started = time.perf_counter()
    store.refresh_statistics()
    built.after["ANALYZE"] = time.perf_counter() - started
    conn = t.cast(t.Any, store).conn
    if isinstance(store, SqliteStore):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return
    started = time.perf_counter()
    for table in ("memories", "memory_vectors", "memory_users", "memory_terms"):
        conn.execute(f"VACUUM {table}")
    built.after["VACUUM"] = time.perf_counter() - started


def sizes(store: Store, path: str | None) -> tuple[int, int | None]:
    """Bytes of the whole database, and of the keyword index (None if unknown)."""
    conn = t.cast(t.Any, store).conn
    if isinstance(store, SqliteStore):
        assert path is not None
        total = os.path.getsize(path) + sum(
            os.path.getsize(path + s) for s in ("-wal",) if os.path.exists(path + s)
        )
        try:
            (index,) = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN "
                "('memory_terms', 'sqlite_autoindex_memory_terms_1')"
            ).fetchone()
        except Exception:  # dbstat is an optional part of SQLite
            index = None
        return total, index
    (total,) = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    (index,) = conn.execute("SELECT pg_total_relation_size('memory_terms')").fetchone()
    return int(total), int(index)


# -- measuring ---------------------------------------------------------------------


class Precomputed(Embedder):
    """An embedder that knows every query's vector already (the service path's input)."""

    model_id = "bench:random"
    dimensions = DIMS

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def embed(self, texts: t.Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[text] for text in texts])

    def warm_up(self) -> None:
        pass


@dataclasses.dataclass
class Query:
    who: User
    text: str
    kind: str
    vector: np.ndarray


class Queries:
    """Every query the run asks, made (and "embedded") once, before anything is timed."""

    def __init__(self, words: Vocabulary, space: Space, users_at_start: int):
        self.words = words
        self.space = space
        self.users_at_start = users_at_start
        self.vectors: dict[str, np.ndarray] = {}

    def make(self, number: int, j: int) -> Query:
        who = user(self.words, number)
        text, kind = query_text(self.words, who, j, self.users_at_start)
        if text not in self.vectors:
            rng = np.random.default_rng([number, j])
            self.vectors[text] = self.space.draw(rng, np.array([who.topics[0]]))[0]
        return Query(who, text, kind, self.vectors[text])


class Worker:
    """One worker's view of a database: its own connection and search cache."""

    def __init__(self, store: Store, queries: Queries):
        self.store = store
        self.cache = SearchCache(CACHE_BYTES, DIMS)
        self.embedder = CachedEmbedder(Precomputed(queries.vectors), len(queries.vectors) + 1)
        for text in queries.vectors:  # every query's vector in the query cache
            self.embedder.embed([text])

    def direct(self, mode: str, q: Query) -> tuple[float, tuple[str, ...]]:
        """memsvc.search.search, as the service calls it once the query is embedded."""
        started = time.perf_counter()
        request = SearchRequest(
            TENANT, q.who.id, q.vector, q.text, LIMIT, 0.0, Scope(clock.now_ms()), mode
        )
        found = search(self.store, self.cache, request)
        return time.perf_counter() - started, tuple(r.memory.id for r in found)

    def whole(self, mode: str, q: Query) -> float:
        """The service call, query embedding cached."""
        started = time.perf_counter()
        service.search(
            self.store, self.embedder, TENANT, q.who.id, q.text, LIMIT, 0.0, self.cache,
            mode=mode,
        )  # fmt: skip
        return time.perf_counter() - started


@dataclasses.dataclass
class Measured:
    #: (row, size) -> seconds of each search; size 0 is the small database, 1 the large.
    times: dict[tuple[str, int], list[float]]
    #: (mode, user, query, size) -> the ids found.
    answers: dict[tuple[str, int, str, int], tuple[str, ...]]
    #: (mode, query kind) -> how many results each warm search found (small database).
    found: dict[tuple[str, str], list[int]]
    #: The load average (1 min) at the start and at the end.
    load: tuple[float, float]


def measure(
    opens: tuple[t.Callable[[], Store], t.Callable[[], Store]],
    queries: Queries,
    warm_users: t.Sequence[int],
    warm_queries: int,
    cold_users: t.Sequence[int],
    new_users: t.Sequence[int],
) -> Measured:
    """Both sizes side by side, taking turns search by search (which goes first alternates).

    ``opens`` open a connection to the small and to the large database. Each
    size gets a worker for the warm searches, and one per mode for first
    searches, so that each of those is its worker's first search of the user.
    """
    load = os.getloadavg()[0]
    times: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    answers: dict[tuple[str, int, str, int], tuple[str, ...]] = {}
    found: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    turn = itertools.count()
    workers = [{role: Worker(open_(), queries) for role in ("warm", *MODES)} for open_ in opens]

    def both(row: str, role: str, mode: str, q: Query, service_call: bool = False) -> None:
        order = (0, 1) if next(turn) % 2 else (1, 0)
        for size in order:
            worker = workers[size][role]
            if service_call:
                times[(row, size)].append(worker.whole(mode, q))
                continue
            seconds, ids = worker.direct(mode, q)
            times[(row, size)].append(seconds)
            answers[(mode, q.who.number, q.text, size)] = ids
            if role == "warm" and size == 0:
                found[(mode, q.kind)].append(len(ids))

    try:
        # Warm: each user searched a few times in each mode first.
        for number in warm_users:
            for j, mode in itertools.product((warm_queries, warm_queries + 1), MODES):
                q = queries.make(number, j)
                for size in (0, 1):
                    workers[size]["warm"].direct(mode, q)
        for number, j in itertools.product(warm_users, range(warm_queries)):
            q = queries.make(number, j)
            for mode in MODES:  # the modes take turns too: a busy moment hits all alike
                both(f"{mode}, warm", "warm", mode, q)
            for mode in MODES:
                both(f"{mode}, service call, warm", "warm", mode, q, service_call=True)

        # First searches: a user's first by each mode's worker, the modes taking
        # turns at going first.
        for i, (number, new) in enumerate(itertools.zip_longest(cold_users, new_users)):
            for m in range(len(MODES)):
                mode = MODES[(i + m) % len(MODES)]
                j = (i // len(MODES) + m) % len(KINDS)
                if number is not None:
                    both(f"{mode}, first search", mode, mode, queries.make(number, j))
                if new is not None:
                    seconds, _ = workers[1][mode].direct(mode, queries.make(new, j))
                    times[(f"{mode}, first search, new user", 1)].append(seconds)
    finally:
        for worker in (w for size in workers for w in size.values()):
            close(worker.store)
    return Measured(dict(times), answers, dict(found), (load, os.getloadavg()[0]))


# -- one store ---------------------------------------------------------------------


@dataclasses.dataclass
class StoreRun:
    label: str
    sizes: list[int]  # memories in the small and the large database
    built: list[Built]
    disk: list[tuple[int, int | None]]
    measured: Measured | None = None
    seconds: float = 0.0


class SqliteDatabase:
    """A SQLite file in ``directory``, and the copy of it :meth:`snapshot` makes."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, "keyword-scale.sqlite3")
        self.copy_path = os.path.join(directory, "keyword-scale-small.sqlite3")

    def open(self, copy: bool = False) -> Store:
        return SqliteStore(connect(self.copy_path if copy else self.path, mmap_mb=MMAP_MB))

    def snapshot(self) -> None:
        """Copy the file as it is (call after a checkpoint, no writer open)."""
        shutil.copyfile(self.path, self.copy_path)

    def remove(self) -> None:
        for path, suffix in itertools.product((self.path, self.copy_path), ("", "-wal", "-shm")):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + suffix)


class PostgresDatabase:
    """A database on the tests' PostgreSQL, and the copy of it :meth:`snapshot` makes."""

    path = None

    def __init__(self) -> None:
        from tests.support import postgres

        self.url = postgres.fresh_database("bench_keyword_scale")
        self.copy_url: str | None = None

    def open(self, copy: bool = False) -> Store:
        from memsvc.store.postgres import PgDatabase
        from memsvc.store.postgres import PgStore

        url = self.copy_url if copy else self.url
        assert url is not None
        return PgStore(PgDatabase(url, max_size=1).connect())

    def snapshot(self) -> None:
        """CREATE DATABASE ... TEMPLATE: a file-level copy (no connection may be open)."""
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import conninfo_to_dict

        from tests.support import postgres

        name = conninfo_to_dict(self.url)["dbname"]
        copy = f"{name}_small"
        with psycopg.connect(postgres.server().get_uri(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(copy), sql.Identifier(name)
                )
            )
        self.copy_url = postgres.server().get_uri(database=copy)

    def remove(self) -> None:
        from tests.support import postgres

        for url in (self.url, self.copy_url):
            if url is not None:
                postgres.drop_database(url)


def close(store: Store) -> None:
    t.cast(t.Any, store).conn.close()


def run_store(
    kind: str,
    users: tuple[int, int],
    words: Vocabulary,
    space: Space,
    queries: Queries,
    warm_users: int,
    warm_queries: int,
    cold_users: int,
    directory: str,
) -> StoreRun:
    label = LABELS[kind]
    started = time.perf_counter()
    small, large = users
    warm = list(range(warm_users))
    cold = list(range(warm_users, min(small, warm_users + cold_users)))
    # New users at the large size: spread over those added, as many as the cold ones.
    step = max(1, (large - small) // max(1, len(cold)))
    new = list(range(small, large, step))[: len(cold)]
    run = StoreRun(label, [], [], [])
    db = SqliteDatabase(directory) if kind == "sqlite" else PostgresDatabase()
    try:
        for first, last in [(0, small), (small, large)]:
            progress(f"{label}: building to {last * PER_USER:,} memories")
            builder = db.open()
            try:
                builder.migrate(Precomputed.model_id, DIMS)
                built = grow(builder, words, space, first, last)
                settle(builder, built)
                run.built.append(built)
                run.sizes.append(last * PER_USER)
                run.disk.append(sizes(builder, db.path))
            finally:
                close(builder)
            if first == 0:
                db.snapshot()  # the database as it is now, measured beside the grown one
        progress(f"{label}: measuring {small * PER_USER:,} and {large * PER_USER:,} side by side")
        for number in warm:  # every query made before the workers fill their query caches
            for j in range(warm_queries + 2):
                queries.make(number, j)
        for number, j in itertools.product(cold + new, range(len(KINDS))):
            queries.make(number, j)
        opens = (lambda: db.open(copy=True), db.open)
        run.measured = measure(opens, queries, warm, warm_queries, cold, new)
    finally:
        db.remove()
    run.seconds = time.perf_counter() - started
    return run


# -- the report --------------------------------------------------------------------


def pct(times: t.Sequence[float], p: float) -> float:
    return float(np.percentile(times, p)) * 1000


def row_names() -> list[str]:
    names = []
    for path in ("warm", "first search", "service call, warm"):
        names += [f"{mode}, {path}" for mode in MODES]
    return names


def short(n: int) -> str:
    """50k, 1M."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def report(runs: list[StoreRun], warm_users: int, warm_queries: int) -> None:
    small, large = runs[0].sizes
    a, b = short(small), short(large)
    print(
        f"One database per store grown from {small:,} memories ({small // PER_USER:,} users of "
        f"{PER_USER}) to {large:,} ({large // PER_USER:,} users), {DIMS}-d, texts of 15-40 "
        f"words; a copy of it at {a} and the grown one searched side by side, search by "
        f"search; searches of a {PER_USER}-memory user, limit {LIMIT}, threshold 0, query "
        "vectors made beforehand; times in ms"
    )
    print(
        f"{'store':<11}{'search':<37}{'n':>5}{a + ' p50':>9}{'p95':>8}{b + ' p50':>9}{'p95':>8}"
        f"{b + '/' + a:>8}{'p95':>6}"
    )
    worst: dict[str, float] = {}
    for run in runs:
        assert run.measured is not None
        times = run.measured.times
        for name in row_names() + [f"{mode}, first search, new user" for mode in MODES]:
            base = times[(name.replace(", new user", ""), 0)]
            now = times[(name, 1)]
            ratio = pct(now, 50) / pct(base, 50)
            if "service" not in name:
                worst[run.label] = max(worst.get(run.label, 0.0), ratio)
            print(
                f"{run.label:<11}{name:<37}{len(now):>5}{pct(base, 50):>9.2f}{pct(base, 95):>8.2f}"
                f"{pct(now, 50):>9.2f}{pct(now, 95):>8.2f}"
                f"{ratio:>8.2f}{pct(now, 95) / pct(base, 95):>6.2f}"
            )
    print(
        f"warm: {warm_users} users x {warm_queries} queries, each user searched twice in each "
        f"mode first; first search: a user's first search by that mode's worker (the same "
        f"users and queries at {a} and {b}); new user: as many of the users added between {a} "
        f"and {b}, against the {a} first searches; {b}/{a}: ratio of the p50s, then of the p95s"
    )
    print(
        "largest p50 ratio of memsvc.search.search: "
        + ", ".join(f"{label} {ratio:.2f}" for label, ratio in worst.items())
    )
    print()
    for run in runs:
        assert run.measured is not None
        answers = run.measured.answers
        pairs = [(key, ids) for key, ids in answers.items() if key[3] == 0]
        same = sum(answers.get((*key[:3], 1)) == ids for key, ids in pairs)
        load = run.measured.load
        print(
            f"{run.label}: {same} of {len(pairs)} searches answered the same at {a} and {b}; "
            f"load average {load[0]:.1f} as the measurements began, {load[1]:.1f} as they ended"
        )
        for size, built, (total, index) in zip(run.sizes, run.built, run.disk, strict=True):
            extra = "".join(f", {name} {s:.1f} s" for name, s in built.after.items())
            keyword = "" if index is None else f", the keyword index {index / size:,.0f}"
            print(
                f"  to {size:,}: {built.memories:,} memories added in {built.total:.0f} s, "
                f"{built.memories / built.seconds:,.0f} memories/s in the store{extra}; "
                f"{total / size:,.0f} bytes on disk per memory{keyword}"
            )
        print(f"  {run.label} took {run.seconds / 60:.1f} min")
    print()
    assert runs[0].measured is not None
    found = runs[0].measured.found
    print(f"results per warm search by query kind ({a}; {b} answered the same):")
    print(f"  {'kind':<14}" + "".join(f"{mode:>10}" for mode in MODES))
    for kind in KINDS:
        print(
            f"  {kind:<14}"
            + "".join(f"{np.mean(found.get((mode, kind), [0])):>10.1f}" for mode in MODES)
        )


# -- the run -----------------------------------------------------------------------


def memory_dir() -> str | None:
    """/dev/shm where it can be written (PostgreSQL's data is there too), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def main(argv: t.Sequence[str] | None = None) -> list[StoreRun]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="5,000 against 100,000 memories")
    parser.add_argument("--users", default=None, help="users of 100 at each size: 500,10000")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--warm-users", type=int, default=20)
    parser.add_argument("--warm-queries", type=int, default=12)
    parser.add_argument("--cold-users", type=int, default=480)
    parser.add_argument("--dir", default=memory_dir())
    args = parser.parse_args(argv)
    small, large = (
        int(n) for n in (args.users or ("50,1000" if args.quick else "500,10000")).split(",")
    )
    if not args.warm_users < small < large:
        parser.error("--users: two sizes, the first larger than --warm-users")
    started = time.perf_counter()
    words = Vocabulary()
    space = Space()
    queries = Queries(words, space, small)
    runs = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for kind in args.stores.split(","):
            runs.append(
                run_store(
                    kind, (small, large), words, space, queries, args.warm_users,
                    args.warm_queries, args.cold_users, tmp,
                )
            )  # fmt: skip
    report(runs, args.warm_users, args.warm_queries)
    print()
    print(f"(the whole run took {(time.perf_counter() - started) / 60:.1f} min)")
    return runs


if __name__ == "__main__":
    with recording("keyword_scale"):
        main()
