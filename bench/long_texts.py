"""What one call with a long text costs: embedding windows and CPU seconds, one core.

Through the API in-process (Flask's test client, a SQLite file, the bundled
int8 model), pinned to one core with one thread per numeric library, as a
gunicorn worker runs: ``memory.add`` of a text, then ``memory.search`` with
the same text as the query, semantic and keyword (keyword mode embeds its
query too). The texts, made on the spot from fixed seeds
(``tests/support/texts.py``):

  english   65,536 characters of varied English prose (the evaluation set's
            memories in random order)
  chinese   65,536 varied Chinese characters in punctuated phrases
  typical   a memory of 300 characters

For each: the status of the answer, the texts the model embedded (windows,
and a whole text where the model takes it), CPU seconds of the process
(median of ``--rounds``; the long texts once), and the CPU of counting the
windows alone (tokenizing and cutting, no embedding).

    python -m bench.long_texts [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import typing as t

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

from bench.report import recording  # noqa: E402
from memsvc import create_app  # noqa: E402
from memsvc.api.context import store  # noqa: E402
from memsvc.embeddings.local import LocalEmbedder  # noqa: E402
from memsvc.embeddings.windows import windows_of  # noqa: E402
from memsvc.services import keys  # noqa: E402
from tests.support import texts  # noqa: E402
from tests.support.helpers import CountingEmbedder  # noqa: E402
from tests.support.servers import MODEL_CACHE  # noqa: E402

TEXTS = {
    "english": lambda: texts.english(65_536),
    "chinese": lambda: texts.chinese(65_536),
    "typical": texts.typical,
}
CALLS = ("add", "search", "keyword")


def pin_to_one_core() -> int:
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


class Api:
    """An app on a fresh SQLite file, with the bundled model counted."""

    def __init__(self, directory: str, embedder: LocalEmbedder, **settings: t.Any):
        self.app = create_app(
            {
                "DATABASE": os.path.join(directory, "memsvc.sqlite3"),
                "LIMITS_DIR": os.path.join(directory, "limits"),
                "MODEL_CACHE_DIR": MODEL_CACHE,
                "QUERY_CACHE_ENTRIES": 0,
                **settings,
            },
            instance_path=os.path.join(directory, "instance"),
        )
        self.embedder = CountingEmbedder(embedder)
        self.app.extensions["memsvc"].embedder = self.embedder
        with self.app.app_context():
            secret = keys.create(store(), "bench", "bench", "memsvc").secret
        self.headers = {"x-api-key": secret}
        self.client = self.app.test_client()

    def call(self, kind: str, text: str) -> tuple[int, int, float]:
        """(HTTP status, texts embedded, CPU seconds) of one call."""
        before = self.embedder.texts
        started = time.process_time()
        if kind == "add":
            resp = self.client.post(
                "/trpc/memory.add", json={"userId": "u", "content": text}, headers=self.headers
            )
        else:
            mode = "semantic" if kind == "search" else "keyword"
            resp = self.client.get(
                "/trpc/memory.search",
                query_string={"input": json.dumps({"userId": "u", "query": text, "mode": mode})},
                headers=self.headers,
            )
        cpu = time.process_time() - started
        return resp.status_code, self.embedder.texts - before, cpu

    def close(self) -> None:
        self.app.extensions["memsvc"].close()


def counting_cpu(embedder: LocalEmbedder, text: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.process_time()
        windows_of(embedder, text)
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    core = pin_to_one_core()
    embedder = LocalEmbedder(backend="onnx", cache_dir=MODEL_CACHE)
    embedder.warm_up()
    samples = {name: make() for name, make in TEXTS.items()}
    print(
        f"one core (cpu {core}); bundled model, int8 ONNX; through the API in-process "
        "(SQLite, query cache off)"
    )
    print("text       chars  tokens  call     status  windows  CPU s  count CPU ms")
    with tempfile.TemporaryDirectory() as directory:
        api = Api(directory, embedder)
        try:
            for name, text in samples.items():
                tokens = len(embedder.encoder.tokenizer.encode(text, add_special_tokens=False).ids)
                rounds = args.rounds if len(text) < 10_000 else 1
                count_ms = 1000 * counting_cpu(embedder, text, args.rounds)
                for kind in CALLS:
                    results = [api.call(kind, text) for _ in range(rounds)]
                    status, windows, _ = results[-1]
                    cpu = statistics.median(r[2] for r in results)
                    print(
                        f"{name:8} {len(text):7} {tokens:7}  {kind:8} {status:6} {windows:8} "
                        f"{cpu:6.2f} {count_ms:13.1f}"
                    )
        finally:
            api.close()


if __name__ == "__main__":
    with recording("long_texts"):
        main()
