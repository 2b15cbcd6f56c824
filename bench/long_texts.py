"""What one call with a long text costs: embedding windows and CPU seconds, one core.

Through the API in-process (the app's WSGI entry, a SQLite file, the bundled
int8 model), pinned to one core with one thread per numeric library, as a
gunicorn worker runs: ``memory.add`` of a text, then ``memory.search`` with
the same text as the query, semantic and keyword (keyword mode embeds its
query too). The texts, made on the spot from fixed seeds
(``tests/support/texts.py``):

  english   65,536 characters of varied English prose (the evaluation set's
            memories in random order)
  chinese   65,536 varied Chinese characters in punctuated phrases
  typical   a memory of 300 characters

Each call on two apps in turn: "as before", with no budget and every call
counting as one (MEMSVC_MAX_EMBEDDING_WINDOWS=0,
MEMSVC_RATE_LIMIT_WINDOWS_PER_CALL=0), and "now", with the defaults (at
most 800 windows a call, one call per 16 windows). For each: the windows
the text needs, the CPU of counting them alone (tokenizing and cutting, no
embedding: median of ``--rounds``), and per app the status of the answer,
the texts the model embedded (windows, and a whole text where the model
takes it), the CPU seconds of the call (median of ``--rounds``; the long
texts once) and, now, how many calls it counts as against its key's
per-minute limit. Every call has a key of its own, so no limit refuses it.

    python -m bench.long_texts [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import tempfile
import time
import typing as t
import urllib.parse

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

from werkzeug.test import EnvironBuilder  # noqa: E402

from bench.report import recording  # noqa: E402
from memsvc import create_app  # noqa: E402
from memsvc.api.context import store  # noqa: E402
from memsvc.embeddings.local import LocalEmbedder  # noqa: E402
from memsvc.embeddings.windows import needed  # noqa: E402
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
OFF = {"MAX_EMBEDDING_WINDOWS": 0, "RATE_LIMIT_WINDOWS_PER_CALL": 0}


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
        self.client = self.app.test_client()

    def call(self, kind: str, text: str) -> tuple[int, int, float]:
        """(HTTP status, texts embedded, CPU seconds) of one call, with a key of its own.

        The request is built before the clock starts: only the server's work is timed.
        """
        with self.app.app_context():
            secret = keys.create(store(), "bench", "bench", "memsvc").secret
        headers = {"x-api-key": secret}
        if kind == "add":
            built = EnvironBuilder(
                path="/trpc/memory.add",
                method="POST",
                json={"userId": "u", "content": text},
                headers=headers,
            )
        else:
            mode = "semantic" if kind == "search" else "keyword"
            query = urllib.parse.quote(json.dumps({"userId": "u", "query": text, "mode": mode}))
            built = EnvironBuilder(
                path="/trpc/memory.search", query_string="input=" + query, headers=headers
            )
        environ = built.get_environ()
        statuses: list[str] = []
        before = self.embedder.texts
        started = time.process_time()
        b"".join(self.app.wsgi_app(environ, lambda status, *_: statuses.append(status)))
        cpu = time.process_time() - started
        return int(statuses[0].split()[0]), self.embedder.texts - before, cpu

    def close(self) -> None:
        self.app.extensions["memsvc"].close()


def counting_cpu(embedder: LocalEmbedder, text: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.process_time()
        embedder.windows(text)
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
    print(f"{'':50}{'as before':^24}{'now':^34}")
    print(
        "text       chars  tokens  call     needs  count ms  status embedded  CPU s  "
        "status embedded  CPU s counts as"
    )
    with contextlib.ExitStack() as stack:
        apps = [
            Api(stack.enter_context(tempfile.TemporaryDirectory()), embedder, **settings)
            for settings in (OFF, {})
        ]
        for api in apps:
            stack.callback(api.close)
        per_call = apps[1].app.config["RATE_LIMIT_WINDOWS_PER_CALL"]
        for name, text in samples.items():
            tokens = len(embedder.encoder.tokenizer.encode(text, add_special_tokens=False).ids)
            rounds = args.rounds if len(text) < 10_000 else 1
            count_ms = 1000 * counting_cpu(embedder, text, args.rounds)
            for kind in CALLS:
                needs = needed(embedder, text, query=kind != "add")
                row = f"{name:8} {len(text):7} {tokens:7}  {kind:8} {needs:5} {count_ms:9.1f}"
                for api in apps:
                    results = [api.call(kind, text) for _ in range(rounds)]
                    status, windows, _ = results[-1]
                    cpu = statistics.median(r[2] for r in results)
                    row += f"  {status:6} {windows:8} {cpu:6.2f}"
                calls = math.ceil(needs / per_call) if status == 200 else 1
                print(f"{row} {calls:9}")


if __name__ == "__main__":
    with recording("long_texts"):
        main()
