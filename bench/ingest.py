"""What storing a conversation costs: one memory.ingest, against embedding its texts and adds.

The conversation is 600 messages of the eval set's dialogues
(tests/data/eval/conversations), each its speaker's words. Three ways, in
rounds that take turns so the machine's drift touches all alike:

  embedder   the bundled model in this process, every text in one batch
             (memsvc.embeddings.windows.document_vectors): the floor
  ingest     one memory.ingest call of all 600 messages to memsvc under
             gunicorn (limits off), a new session each round
  adds       600 memory.add calls one after another on one keep-alive
             connection, to the same server

and, to say what the model itself does with batches, the embedder one text
at a time and in batches of 8, 32 and 600 (texts per second, one thread).
Targets: ingest >= 0.7x the embedder's batch rate, >= 3x the adds.

    python -m bench.ingest [--messages 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time
import uuid

import requests

from bench.report import recording
from tests.support.servers import MODEL_CACHE
from tests.support.servers import start_server

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "eval" / "conversations"


def conversation(n: int) -> list[dict[str, str]]:
    """``n`` messages of the eval conversations, as ingest takes them (speaker as name)."""
    out: list[dict[str, str]] = []
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["kind"] != "turn":
                continue
            out.append({"role": "user", "name": record["speaker"], "content": record["text"]})
            if len(out) == n:
                return out
    return out


def timed(call: object) -> float:
    started = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    messages = conversation(args.messages)
    texts = [m["content"] for m in messages]
    n = len(texts)

    from memsvc.embeddings.local import LocalEmbedder
    from memsvc.embeddings.windows import document_vectors

    embedder = LocalEmbedder(cache_dir=MODEL_CACHE)
    embedder.warm_up()
    windows = sum(len(embedder.windows(text)) for text in texts)

    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            pathlib.Path(tmp),
            MEMSVC_RATE_LIMIT_PER_MINUTE="0",
            MEMSVC_CONCURRENCY_LIMIT="0",
            MEMSVC_MAX_EMBEDDING_WINDOWS="0",
            MEMSVC_MAX_INGEST_MESSAGES=str(max(1000, n)),
        )
        try:
            key = server.create_key("bench", "bench")
            http = requests.Session()
            http.headers.update({"x-api-key": key})
            base = server.trpc

            def ingest() -> None:
                body = {"userId": f"u-{uuid.uuid4().hex[:8]}", "messages": messages}
                resp = http.post(f"{base}/memory.ingest", json=body)
                assert resp.status_code == 200, resp.text[:300]

            def adds() -> None:
                user = f"u-{uuid.uuid4().hex[:8]}"
                for text in texts:
                    resp = http.post(f"{base}/memory.add", json={"userId": user, "content": text})
                    assert resp.status_code == 200, resp.text[:300]

            def batch() -> None:
                document_vectors(embedder, texts)

            ways = {"embedder": batch, "ingest": ingest, "adds": adds}
            ingest()  # warm the workers' model and connections
            seconds: dict[str, list[float]] = {way: [] for way in ways}
            for r in range(args.rounds):
                order = list(ways)[r % 3 :] + list(ways)[: r % 3]
                for way in order:
                    seconds[way].append(timed(ways[way]))
        finally:
            server.stop()

    rate = {way: n / statistics.median(s) for way, s in seconds.items()}
    print(
        f"{n} messages ({windows} embedding windows), median of {args.rounds} rounds taking "
        "turns; gunicorn 2 workers x 8 threads, one model thread per worker"
    )
    print(f"{'way':<10}{'messages/s':>12}{'seconds':>9}")
    for way in ways:
        print(f"{way:<10}{rate[way]:>12.0f}{statistics.median(seconds[way]):>9.2f}")
    print(f"ingest / embedder batch: {rate['ingest'] / rate['embedder']:.2f}  (target >= 0.7)")
    print(f"ingest / sequential adds: {rate['ingest'] / rate['adds']:.2f}  (target >= 3)")

    print()
    print("The model alone, texts per second by batch size (one thread):")
    sample = texts[: min(n, 600)]
    for size in (1, 8, 32, len(sample)):
        spent = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            for i in range(0, len(sample), size):
                embedder.embed(sample[i : i + size])
            spent.append(time.perf_counter() - started)
        print(f"  batch {size:>4}: {len(sample) / statistics.median(spent):>6.0f} texts/s")


if __name__ == "__main__":
    with recording("ingest"):
        main()
