"""What a console page costs the server, for an end user with 10,000 memories.

Builds the app in this process on a fresh SQLite database, gives one end
user 10,000 memories (and the tenant 2,000 more users), signs in to the
console, and times whole requests through the app (WSGI, no network): the
console's pages against the API calls they are built from, measured in the
same run. The user also has 200 conversations, one of them 1,000 messages
long: their page lists sessions too, and a session's page is timed against
its memory.session call. Then a memory's history page, for versions that differ a little
and for versions of 64 KiB that share nothing (the most comparing a page can
be asked for, bounded by the diff's budget), and one pair of texts compared
by the diff before it was bounded (difflib) and after. Server time only; the
browser's work is not counted.

    python -m bench.console [--memories 10000] [--requests 200]
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import statistics
import tempfile
import time
import typing as t
import uuid

import numpy as np

from bench.report import recording
from memsvc.api.console import diff


def _seed(app: t.Any, memories: int, users: int) -> str:
    from memsvc import clock
    from memsvc.api.context import store
    from memsvc.models import Memory
    from memsvc.services import keys

    with app.app_context():
        s = store()
        dims = s.embedder()[1]
        rng = np.random.default_rng(0)
        now = clock.now_ms()
        batch: list[Memory] = []

        def flush() -> None:
            vectors = rng.standard_normal((len(batch), dims)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with s.write():
                s.insert_memories(batch, [v[None, :] for v in vectors])
            batch.clear()

        for i in range(memories):
            content = f"Memory {i}: the user mentioned topic {i % 97} while planning trip {i % 13}"
            metadata = {"topic": i % 97, "source": "chat"}
            batch.append(
                Memory(str(uuid.uuid4()), "bench", "big-user", content, metadata, now + i, now + i)
            )
            if len(batch) == 1000:
                flush()
        for i in range(users):
            batch.append(Memory(str(uuid.uuid4()), "bench", f"user-{i:05d}", "x", {}, now, now))
            if len(batch) == 1000:
                flush()
        if batch:
            flush()
        return keys.create(s, "bench", "bench", "memsvc").secret


def _prose(words: int, seed: int) -> str:
    """Words from a small vocabulary: two such texts share words everywhere, runs nowhere."""
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(400)}" for _ in range(words))


def _history(app: t.Any, versions: list[tuple[str, dict[str, t.Any]]]) -> str:
    """A memory of the bench tenant whose versions are ``versions``, oldest first; its id."""
    from memsvc import clock
    from memsvc.api.context import store
    from memsvc.models import Memory
    from memsvc.models import Version

    with app.app_context():
        s = store()
        dims = s.embedder()[1]
        now = clock.now_ms()
        memory_id = str(uuid.uuid4())
        content, metadata = versions[-1]
        current = Memory(memory_id, "bench", "history-user", content, metadata, now, now,
                         version=len(versions))  # fmt: skip
        vector = np.ones((1, dims), dtype=np.float32) / np.sqrt(dims)
        with s.write():
            s.insert_memories([current], [vector])
            found = s.locate("bench", memory_id, now)
            assert found is not None
            earlier = [Version(i + 1, text, meta, "add" if i == 0 else "update", now - 1000 + i)
                       for i, (text, meta) in enumerate(versions[:-1])]  # fmt: skip
            s.insert_versions(found[0], earlier)
        return memory_id


def _conversations(client: t.Any, secret: str) -> None:
    """The big user's conversations: one of 1,000 messages, 199 of two."""
    headers = {"x-api-key": secret}

    def ingest(session_id: str, messages: list[dict[str, t.Any]]) -> None:
        body = {"userId": "big-user", "sessionId": session_id, "messages": messages}
        answer = client.post("/trpc/memory.ingest", json=body, headers=headers)
        assert answer.status_code == 200, answer.get_data(as_text=True)[:500]

    def said(i: int) -> dict[str, t.Any]:
        text = f"Message {i}: we spoke about trip {i % 13} yesterday, the next is next week"
        if i % 2:
            return {"role": "assistant", "content": text}
        return {"role": "user", "name": "Ada", "content": text}

    for start in (0, 500):
        ingest("long", [said(i) for i in range(start, start + 500)])
    for n in range(199):
        ingest(f"chat-{n:03d}", [{"role": "user", "content": f"Question {n} about topic {n}"},
                                 {"role": "assistant", "content": f"Answer {n}"}])  # fmt: skip


def _difflib_words(before: str, after: str) -> int:
    """The console's word diff before it was bounded (difflib, no autojunk): runs made."""
    tokens = re.compile(r"\s+|\w+|[^\w\s]")
    a, b = tokens.findall(before), tokens.findall(after)
    return len(difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes())


def _time(client: t.Any, path: str, n: int, **kwargs: t.Any) -> tuple[float, float]:
    """Median and 90th percentile of ``n`` requests, in ms (after a warm-up)."""
    for _ in range(5):
        assert client.get(path, **kwargs).status_code == 200
    times = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.get(path, **kwargs)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.get_data(as_text=True)[:500]
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    from memsvc import create_app

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            {"DATABASE": f"{tmp}/memsvc.sqlite3", "RATE_LIMIT_PER_MINUTE": 0},
            instance_path=tmp,
        )
        secret = _seed(app, args.memories, args.users)
        client = app.test_client()
        form = client.get("/console/sign-in").get_data(as_text=True)
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf is not None
        signed = client.post(
            "/console/sign-in", data={"csrf": csrf.group(1), "what": "key", "secret": secret}
        )
        assert signed.status_code == 302, signed.get_data(as_text=True)
        api = {"headers": {"x-api-key": secret}}
        _conversations(client, secret)
        rows = [
            (
                "API memory.getAll, 26 memories (baseline)",
                _time(
                    client,
                    '/trpc/memory.getAll?input={"userId":"big-user","limit":26}',
                    args.requests,
                    **api,
                ),
            ),
            (
                "console: the user's page (25 memories)",
                _time(client, "/console/user?id=big-user", args.requests),
            ),
            (
                "API memory.getAll, 26, metadata filter",
                _time(
                    client,
                    '/trpc/memory.getAll?input={"userId":"big-user","limit":26,'
                    '"filter":{"topic":{"in":[3,5]}}}',
                    args.requests,
                    **api,
                ),
            ),
            (
                "console: the user's page, metadata filter",
                _time(
                    client,
                    '/console/user?id=big-user&filter={"topic":{"in":[3,5]}}',
                    args.requests,
                ),
            ),
            (
                "API memory.users, 51 users",
                _time(client, '/trpc/memory.users?input={"limit":51}', args.requests, **api),
            ),
            ("console: end users (50)", _time(client, "/console/users", args.requests)),
            (
                "API memory.sessions, 11 sessions",
                _time(
                    client,
                    '/trpc/memory.sessions?input={"userId":"big-user","limit":11}',
                    args.requests,
                    **api,
                ),
            ),
            (
                "API memory.session, 51 messages",
                _time(
                    client,
                    '/trpc/memory.session?input={"userId":"big-user","sessionId":"long",'
                    '"limit":51,"after":499}',
                    args.requests,
                    **api,
                ),
            ),
            (
                "console: a session's page (50 messages)",
                _time(client, "/console/session?user=big-user&id=long&at=503", args.requests),
            ),
        ]
        # A memory's history: 20 versions of 2,000 words, each a small edit of the one
        # before; and 8 versions of 64 KiB that share no run of words (and as much
        # metadata), the most comparing a page can be asked for.
        base = _prose(2000, 0).split(" ")
        small = [(" ".join(base[: 100 * i] + ["edited", "here"] + base[100 * i :]), {"v": i})
                 for i in range(20)]  # fmt: skip
        large = [(_prose(9300, i)[:65_000], {"note": _prose(2000, 100 + i)[:12_000]})
                 for i in range(8)]  # fmt: skip
        small_id, large_id = _history(app, small), _history(app, large)
        heavy = max(5, args.requests // 10)
        history = [
            (
                "API memory.history, 20 versions, small edits",
                _time(
                    client,
                    f'/trpc/memory.history?input={{"id":"{small_id}"}}',
                    args.requests,
                    **api,
                ),  # fmt: skip
            ),
            (
                "console: their page, each diff word by word",
                _time(client, f"/console/memory?id={small_id}", args.requests),
            ),
            (
                "API memory.history, 8 versions of 64 KiB",
                _time(client, f'/trpc/memory.history?input={{"id":"{large_id}"}}', heavy, **api),
            ),
            (
                "console: their page, all of its diff budget",
                _time(client, f"/console/memory?id={large_id}", heavy),
            ),
        ]
        # The comparing itself: the large history's pairs with a whole page's budget.
        versions = [{"version": i + 1, "content": text, "metadata": meta, "event": "update",
                     "at": "-"} for i, (text, meta) in enumerate(large)]  # fmt: skip
        budget = diff.Budget()
        started = time.perf_counter()
        diff.versions(versions, budget)
        compared_ms = (time.perf_counter() - started) * 1000
        spent = diff.PAGE_STEPS - budget.left
        # The diff before it was bounded, on one pair of 4,000 characters.
        before_pair = (_prose(700, 1)[:4000], _prose(700, 2)[:4000])
        started = time.perf_counter()
        _difflib_words(*before_pair)
        difflib_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        diff.words(*before_pair)
        bounded_ms = (time.perf_counter() - started) * 1000
    with recording("console"):
        print(
            f"one end user with {args.memories:,} memories, {args.users:,} other users; "
            f"{args.requests} requests each through the app in-process (server time, no network)"
        )
        print(f"{'request':45} {'p50 ms':>7} {'p90 ms':>7} {'ratio':>6}")
        base = rows[0][1][0]
        for name, (p50, p90) in rows:
            print(f"{name:45} {p50:7.1f} {p90:7.1f} {p50 / base:6.2f}")
        worst = max(p50 for name, (p50, _) in rows if name.startswith("console"))
        print(f"\nslowest console page, median: {worst:.1f} ms (target: under 50 ms)")
        print(
            "\na memory's history page: its versions compared word by word within "
            f"{diff.PAGE_STEPS:,} steps a page"
        )
        print(f"{'request':45} {'p50 ms':>7} {'p90 ms':>7} {'ratio':>6}")
        for name, (p50, p90) in history:
            print(f"{name:45} {p50:7.1f} {p90:7.1f} {p50 / base:6.2f}")
        print(
            f"\ncomparing the 8 versions of 64 KiB: {spent:,} steps of its budget, "
            f"{compared_ms:.0f} ms in all"
        )
        print(
            f"one pair of 4,000-character texts sharing no run of words: the diff before "
            f"(difflib) {difflib_ms:.0f} ms, bounded {bounded_ms:.1f} ms "
            f"({difflib_ms / bounded_ms:.0f}x)"
        )


if __name__ == "__main__":
    main()
