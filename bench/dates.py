"""What finding dates costs next to embedding the same text, one core.

memsvc.dates runs on every text a memory is added, ingested or updated
with, and on every hybrid query; the bundled model embeds the same texts.
Both are timed in one run, pinned to one core with one thread per numeric
library, as a gunicorn worker runs:

  short      the sentences of the date table (tests/support/date_table.py:
             mostly dates, and traps), then 200 memories of about 300
             characters (tests/support/texts.py); dates: mean per text over
             ``--rounds`` passes; the model: mean per text, each embedded on
             its own as memory.add does (document_vectors), one pass
  query      the table's sentences as search queries (split_query)
  64 KiB     English prose (the evaluation set's memories in random order),
             the table's sentences repeated (a date every few words), and
             "1 " repeated (a digit at every other character: the most
             places where an expression could start); dates: median of
             ``--rounds``; the model: the prose, once (its windows)

The ratio is dates / model: the share of an add's CPU that dates add.

    python -m bench.dates [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import typing as t

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

from bench.report import recording  # noqa: E402
from memsvc import dates  # noqa: E402
from memsvc.embeddings.local import LocalEmbedder  # noqa: E402
from memsvc.embeddings.windows import document_vectors  # noqa: E402
from tests.support import texts  # noqa: E402
from tests.support.date_table import REF  # noqa: E402
from tests.support.date_table import TABLE  # noqa: E402
from tests.support.servers import MODEL_CACHE  # noqa: E402


def pin_to_one_core() -> int:
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def per_text(fn: t.Callable[[str], object], items: list[str], rounds: int) -> float:
    """Mean seconds per text over ``rounds`` passes (the best pass: the machine is shared)."""
    passes = []
    for _ in range(rounds):
        started = time.perf_counter()
        for text in items:
            fn(text)
        passes.append((time.perf_counter() - started) / len(items))
    return min(passes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    core = pin_to_one_core()
    print(f"one core (#{core}); reference {REF.isoformat()}; best of {args.rounds} passes\n")

    embedder = LocalEmbedder(backend="onnx", cache_dir=MODEL_CACHE)
    document_vectors(embedder, ["warm up"])

    def find(text: str) -> list[dates.DateSpan]:
        return dates.find_dates(text, REF)

    def embed(text: str) -> object:
        return document_vectors(embedder, [text])

    sentences = [s for s, _ in TABLE if s]
    memories = [texts.typical(seed) for seed in range(200)]
    found = sum(len(find(s)) for s in sentences + memories)
    print(f"{'short texts':34} {'dates':>10} {'model':>10} {'dates/model':>12}")
    rows = [("table sentences", sentences), ("memories of ~300 chars", memories)]
    for label, items in rows:
        d = per_text(find, items, args.rounds)
        m = per_text(embed, items, 1)
        print(f"{label + f' ({len(items)})':34} {d * 1e3:8.3f}ms {m * 1e3:8.3f}ms {d / m:12.3f}")
    q = per_text(lambda text: dates.split_query(text, REF), sentences, args.rounds)
    m = per_text(embed, sentences, 1)
    label = f"queries ({len(sentences)})"
    print(f"{label:34} {q * 1e3:8.3f}ms {m * 1e3:8.3f}ms {q / m:12.3f}")
    print(f"({found} expressions found in the short texts)\n")

    table_text = " ".join(sentences)
    longs = {
        "English prose": texts.english(65_536),
        "the table repeated": (table_text + " ") * (65_536 // len(table_text) + 1),
        '"1 " repeated': "1 " * 32_768,
    }
    started = time.perf_counter()
    embed(longs["English prose"])
    model_long = time.perf_counter() - started
    print(f"{'64 KiB texts':34} {'dates':>10} {'found':>10} {'dates/model':>12}")
    for label, text in longs.items():
        text = text[:65_536]
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            n = len(find(text))
            times.append(time.perf_counter() - started)
        d = statistics.median(times)
        print(f"{label:34} {d * 1e3:8.1f}ms {n:10} {d / model_long:12.3f}")
    print(f"(the model embeds the 64 KiB of English prose in {model_long:.2f} s)")


if __name__ == "__main__":
    with recording("dates"):
        main()
