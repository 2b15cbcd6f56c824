"""What extraction costs an ingest, how many jobs a worker runs, and a queue under 10x load.

Each part runs the app in this process on a fresh SQLite file, with the
bundled model, and a fake OpenAI-compatible model on 127.0.0.1
(tests/support/fake_llm.py: real HTTP, its echo brain turns each user
message into one fact) that waits a set time before every answer. The
conversations are the eval set's dialogues, ``--messages`` (4) each.

  ingest   memory.ingest with ``extract: true`` against ``false``, through
           the Flask test client, a new user each call, alternating which
           goes first in each pair. The extraction thread is not running:
           what is timed is the store-first write with its queued job
           (the job itself runs later, elsewhere). Target: median <= 1.1x.
  jobs/s   ``--jobs`` jobs queued (by ingests), then the app's own
           extraction thread started (``runtime().start_extraction()``,
           MEMSVC_LLM_CONCURRENCY=4 jobs in flight) and timed until none
           is queued or running; the model answering in 0 ms and in
           500 ms. At 500 ms the bound is concurrency / latency = 8 jobs/s;
           each job also embeds its facts in the worker (the CPU that sets
           the 0 ms rate), so the bound with that work is concurrency /
           (latency + concurrency / the 0 ms rate) when the calls answer
           together, as they do when they were claimed together.
  queue    jobs queued at 10x the 500 ms rate for ``--seconds``, with the
           thread running, then waited on until drained: enqueued, done,
           failed, lost (queued but neither done nor failed once nothing
           is queued or running: must be 0), and the deepest the queue
           got. So that queueing, not embedding, sets the pace, these jobs
           are queued as ingest queues them (memsvc.services.jobs.queue,
           in a write transaction) on conversations stored beforehand.

    python -m bench.extraction [--calls 60] [--jobs 60] [--seconds 5] [--messages 4]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
import typing as t
import uuid

from bench.ingest import conversation
from bench.report import recording
from memsvc import clock
from memsvc import create_app
from memsvc.api.context import runtime
from memsvc.api.context import store
from memsvc.embeddings.local import LocalEmbedder
from memsvc.services import jobs
from memsvc.services import keys
from tests.support.fake_llm import FakeModel
from tests.support.servers import MODEL_CACHE

CONCURRENCY = 4
TENANT = "bench"


class App:
    """The app on a fresh SQLite file, its model the fake one, limits off."""

    def __init__(self, directory: str, embedder: LocalEmbedder, llm_url: str):
        name = uuid.uuid4().hex[:8]
        self.app = create_app(
            {
                "DATABASE": os.path.join(directory, f"{name}.sqlite3"),
                "LIMITS_DIR": os.path.join(directory, f"limits-{name}"),
                "MODEL_CACHE_DIR": MODEL_CACHE,
                "RATE_LIMIT_PER_MINUTE": 0,
                "CONCURRENCY_LIMIT": 0,
                "TENANT_CONCURRENCY_LIMIT": 0,
                "LLM_URL": llm_url,
                "LLM_MODEL": "bench-model",
                "LLM_CONCURRENCY": CONCURRENCY,
                "LLM_TIMEOUT_SECONDS": 30,
            },
            instance_path=os.path.join(directory, f"instance-{name}"),
        )
        self.app.extensions["memsvc"].embedder = embedder
        self.client = self.app.test_client()
        with self.app.app_context():
            secret = keys.create(store(), TENANT, "bench", "memsvc").secret
        self.headers = {"x-api-key": secret}

    def ingest(self, messages: list[dict[str, str]], *, extract: bool) -> dict[str, t.Any]:
        body = {"userId": f"u-{uuid.uuid4().hex[:8]}", "messages": messages, "extract": extract}
        resp = self.client.post("/trpc/memory.ingest", json=body, headers=self.headers)
        assert resp.status_code == 200, resp.get_data(as_text=True)[:300]
        return resp.get_json()["result"]["data"]

    def counts(self) -> dict[str, int]:
        with self.app.app_context():
            return jobs.counts(store())

    def start_extraction(self) -> None:
        with self.app.app_context():
            runtime().start_extraction()

    def queue(self, user: str, message_ids: list[str]) -> None:
        """One job on stored messages, queued as an ingest queues it, and the thread woken."""
        with self.app.app_context():
            full = store()
            now = clock.now_ms()
            with full.read():
                messages = [m for _, m in full.user_memories(TENANT, user, message_ids, now)]
            with full.write():
                jobs.queue(full, TENANT, user, None, messages, now)
            runtime().wake_extraction()

    def close(self) -> None:
        self.app.extensions["memsvc"].close()


def pending(counts: dict[str, int]) -> int:
    return counts.get("queued", 0) + counts.get("running", 0)


def drained(app: App, timeout: float) -> tuple[float, dict[str, int]]:
    """Seconds until nothing is queued or running (or ``timeout``), and the counts then."""
    started = time.perf_counter()
    while True:
        counts = app.counts()
        if not pending(counts) or time.perf_counter() - started > timeout:
            return time.perf_counter() - started, counts
        time.sleep(0.02)


def ingest_latency(app: App, messages: list[dict[str, str]], calls: int) -> dict[bool, list[float]]:
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(3):  # warm up both ways
        app.ingest(messages, extract=True)
        app.ingest(messages, extract=False)
    for i in range(calls):
        for extract in (True, False) if i % 2 else (False, True):
            started = time.perf_counter()
            app.ingest(messages, extract=extract)
            seconds[extract].append(time.perf_counter() - started)
    return seconds


def throughput(app: App, messages: list[dict[str, str]], n: int) -> tuple[float, dict[str, int]]:
    """Jobs per second of the app's extraction thread on ``n`` jobs queued beforehand."""
    for _ in range(n):
        app.ingest(messages, extract=True)
    started = time.perf_counter()
    app.start_extraction()
    spent, counts = drained(app, timeout=max(60.0, n))
    assert not pending(counts), f"jobs still pending after {spent:.0f} s: {counts}"
    return n / (time.perf_counter() - started), counts


def flood(
    app: App, messages: list[dict[str, str]], rate: float, seconds: float
) -> dict[str, float]:
    """Jobs queued at ``rate`` per second for ``seconds`` with the thread running, then drained."""
    stored = []
    for _ in range(20):  # conversations for the jobs to read, stored without a job
        body = app.ingest(messages, extract=False)
        stored.append((body["memories"][0]["userId"], [m["id"] for m in body["memories"]]))
    app.start_extraction()
    deepest = 0
    watching = True

    def watch() -> None:
        nonlocal deepest
        while watching:
            deepest = max(deepest, pending(app.counts()))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    enqueued = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        due = int(elapsed * rate) + 1
        while enqueued < due:
            user, ids = stored[enqueued % len(stored)]
            app.queue(user, ids)
            enqueued += 1
        time.sleep(max(0.0, (enqueued / rate) - (time.perf_counter() - started)))
    queued_for = time.perf_counter() - started
    spent, counts = drained(app, timeout=max(120.0, 4 * enqueued / max(rate / 10, 0.1)))
    watching = False
    watcher.join()
    deepest = max(deepest, pending(app.counts()))
    done, failed = counts.get("done", 0), counts.get("failed", 0)
    return {
        "enqueued": enqueued,
        "rate": enqueued / queued_for,
        "done": done,
        "failed": failed,
        "pending": pending(counts),
        "lost": enqueued - done - failed - pending(counts),
        "deepest": deepest,
        "drain": spent,
        "total": queued_for + spent,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=60, help="ingests each way")
    parser.add_argument("--jobs", type=int, default=60, help="jobs per throughput run")
    parser.add_argument("--seconds", type=float, default=5.0, help="of queueing at 10x")
    parser.add_argument("--messages", type=int, default=4, help="per conversation")
    args = parser.parse_args()
    messages = conversation(args.messages)
    # A line per settled job in the audit trail would bury the results.
    logging.disable(logging.INFO)

    embedder = LocalEmbedder(cache_dir=MODEL_CACHE)
    embedder.warm_up()

    with tempfile.TemporaryDirectory() as tmp, FakeModel() as fake:
        app = App(tmp, embedder, fake.url)
        try:
            seconds = ingest_latency(app, messages, args.calls)
        finally:
            app.close()

        rates: dict[int, float] = {}
        for delay in (0, 500):
            fake.delay_ms = delay
            app = App(tmp, embedder, fake.url)
            try:
                rates[delay], counts = throughput(app, messages, args.jobs)
            finally:
                app.close()
            assert counts.get("done", 0) == args.jobs, counts

        fake.delay_ms = 500
        app = App(tmp, embedder, fake.url)
        try:
            flooded = flood(app, messages, 10 * rates[500], args.seconds)
        finally:
            app.close()

    on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
    bound = CONCURRENCY / 0.5
    print(
        f"SQLite, the app in one process (Flask test client), the bundled model; a fake model "
        f"over HTTP on 127.0.0.1; {args.messages} messages a conversation. A shared 2-core "
        "machine: other work ran at the same time, so expect run-to-run noise."
    )
    print()
    print(f"memory.ingest, median of {args.calls} calls each way, alternating:")
    print(f"  extract: false  {off * 1000:7.1f} ms")
    print(f"  extract: true   {on * 1000:7.1f} ms")
    print(f"  extract on / off: {on / off:.2f}x  (target <= 1.1)")
    print()
    print(f"Extraction thread, {args.jobs} queued jobs, MEMSVC_LLM_CONCURRENCY={CONCURRENCY}:")
    print(f"  model answers in   0 ms: {rates[0]:6.1f} jobs/s")
    print(f"  model answers in 500 ms: {rates[500]:6.1f} jobs/s")
    print(
        f"  500 ms / bound ({CONCURRENCY} / 0.5 s = {bound:.0f} jobs/s): {rates[500] / bound:.2f}"
    )
    # Each job also embeds its facts in the worker (what the 0 ms rate measures): when
    # the four calls answer together, their embeddings share the CPU and end together.
    cpu = CONCURRENCY / (0.5 + CONCURRENCY / rates[0])
    print(
        f"  500 ms / the bound with each job's own work at the 0 ms rate "
        f"({CONCURRENCY} / (0.5 s + {CONCURRENCY} / {rates[0]:.1f}) = {cpu:.1f} jobs/s): "
        f"{rates[500] / cpu:.2f}"
    )
    print()
    f = flooded
    print(
        f"Queue at 10x the 500 ms rate for {args.seconds:g} s "
        f"({f['rate']:.1f} jobs/s queued, model at 500 ms):"
    )
    print(
        f"  enqueued {f['enqueued']:.0f}, done {f['done']:.0f}, failed {f['failed']:.0f}, "
        f"still pending {f['pending']:.0f}, lost {f['lost']:.0f}  (lost must be 0)"
    )
    print(
        f"  deepest queue (queued + running) {f['deepest']:.0f}; drained {f['drain']:.1f} s "
        f"after the last was queued ({f['enqueued'] / f['total']:.1f} jobs/s overall)"
    )


if __name__ == "__main__":
    with recording("extraction"):
        main()
