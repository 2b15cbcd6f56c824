"""The bundled model's forward passes against each other, and the query cache.

Everything runs pinned to one core with one BLAS/OpenMP/ONNX Runtime thread,
as a gunicorn worker runs (one per core). In one run, on the same sentences:

  numpy          the float32 numpy forward (the baseline, and the fallback)
  onnx-none      the ONNX graph, float32
  onnx-int8-blk  int8, every multiply as MatMulNBits (activations quantized
                 per row and block of 128); measured, not shipped
  onnx-int8-dyn  int8, every multiply as DynamicQuantizeMatMul (one
                 activation scale per call); measured, not shipped
  onnx-int8      int8, DynamicQuantizeMatMul but the feed-forward output
                 as MatMulNBits: what memsvc ships

Short: each of the 120 sentences of tests/data/memory_query_pairs.jsonl (60
memories, 60 questions, all at most 32 tokens) embedded alone, several
rounds, candidates interleaved so drift in the machine's speed hits all
alike: p50/p95 ms. Batch: 64 memories of mixed length (those 60 and four
longer ones, 6 to 60 tokens) in one call, the backend's own batch size:
sentences/s, median of 7 calls. Ratios are new/old. Quality: recall@1 and
@5 of each question's memory among all 60, with both embedded by the
candidate ("own") and with memories by numpy and questions by the candidate
("mixed": a database written before the change); cosine to the float32
numpy vectors over the 120 sentences. Memory: RssAnon (private resident
memory) of a fresh process after loading the model and embedding, the model
file already converted as every worker but the first finds it.

Cache: a synthetic agent workload of 2,000 questions drawn Zipf (s=1.1) from
300 distinct ones (each of the 60 questions in five phrasings), through
CachedEmbedder of 256 entries in front of the shipped forward: hit rate and
time against no cache.

    python -m bench.embedding [--rounds 5]
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

# As a memsvc worker runs: one thread for every numeric library, set before
# numpy loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from bench.report import recording  # noqa: E402
from memsvc.embeddings.bert import SentenceEncoder  # noqa: E402
from memsvc.embeddings.cache import CachedEmbedder  # noqa: E402
from memsvc.embeddings.local import LocalEmbedder  # noqa: E402
from memsvc.embeddings.local import bundled_model_dir  # noqa: E402

PAIRS = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "memory_query_pairs.jsonl"
CANDIDATES = {  # name: (backend, quantize)
    "numpy": ("numpy", "int8"),
    "onnx-none": ("onnx", "none"),
    "onnx-int8-blk": ("onnx", "int8-blocks"),
    "onnx-int8-dyn": ("onnx", "int8-dynamic"),
    "onnx-int8": ("onnx", "int8"),
}
SHIPPED = "onnx-int8"
LONGER_MEMORIES = [
    "User is training for a half marathon in October and runs three times a week, "
    "usually before work, but has a sore left knee and is seeing a physiotherapist.",
    "User's partner Sam is vegetarian, so when the user plans dinners for the two of "
    "them they look for restaurants with good meat-free options, ideally Thai or Indian.",
    "User works remotely for a logistics company in Rotterdam and prefers meetings in "
    "the morning, Central European Time, never on Fridays.",
    "User wants reminders about the car's insurance renewal in June and its annual "
    "service, which is due every March at the dealership on Elm Street.",
]


def rss_anon_mb() -> float:
    """This process's private resident memory (RssAnon), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pin_to_one_core() -> int:
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def load(name: str, cache_dir: str) -> SentenceEncoder:
    backend, quantize = CANDIDATES[name]
    return SentenceEncoder(
        bundled_model_dir(), backend=backend, cache_dir=cache_dir, quantize=quantize
    )


def probe_rss(name: str, cache_dir: str) -> None:
    """Child process: load one candidate, embed, print RssAnon (MB) before and after."""
    pin_to_one_core()
    before = rss_anon_mb()
    encoder = load(name, cache_dir)
    encoder.encode(["warm up"])
    encoder.encode(LONGER_MEMORIES * 2)
    print(json.dumps({"before": before, "after": rss_anon_mb(), "backend": encoder.backend}))


def rss_of(name: str, cache_dir: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.embedding", "--rss-probe", name, "--cache-dir", cache_dir],
        capture_output=True, text=True, check=True, cwd=pathlib.Path(__file__).parents[1],
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def recall(memories: np.ndarray, questions: np.ndarray) -> tuple[float, float]:
    scores = questions @ memories.T
    rank = (scores > scores[np.arange(len(scores)), np.arange(len(scores))][:, None]).sum(1)
    return float((rank < 1).mean()), float((rank < 5).mean())


def agent_workload(questions: list[str], n: int, seed: int = 7) -> list[str]:
    phrasings = [
        "{}",
        "{} Answer briefly.",
        "Quick check: {}",
        "Remind me, {}",
        "{} (from memory)",
    ]
    pool = [p.format(q) for q in questions for p in phrasings]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))  # which phrasing is popular is random
    weights = 1.0 / np.arange(1, len(pool) + 1) ** 1.1
    picks = rng.choice(len(pool), size=n, p=weights / weights.sum())
    return [pool[order[i]] for i in picks]


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
    short = memories + questions
    batch = memories + LONGER_MEMORIES

    with tempfile.TemporaryDirectory() as cache_dir:
        started = time.perf_counter()
        encoders = {name: load(name, cache_dir) for name in CANDIDATES}
        convert_s = time.perf_counter() - started
        tokens = [len(e.ids) for e in encoders["numpy"].tokenizer.encode_batch(short)]
        assert max(tokens) <= 32, max(tokens)
        batch_tokens = [len(e.ids) for e in encoders["numpy"].tokenizer.encode_batch(batch)]
        for encoder in encoders.values():
            encoder.encode(short[:8])  # warm up

        short_times: dict[str, list[float]] = {name: [] for name in encoders}
        for _ in range(args.rounds):
            for name, encoder in encoders.items():
                for sentence in short:
                    t0 = time.perf_counter()
                    encoder.encode([sentence])
                    short_times[name].append(time.perf_counter() - t0)
        rates: dict[str, list[float]] = {name: [] for name in encoders}
        for _ in range(7):
            for name, encoder in encoders.items():
                t0 = time.perf_counter()
                encoder.encode(batch)
                rates[name].append(len(batch) / (time.perf_counter() - t0))

        float32_m = encoders["numpy"].encode(memories)
        float32_q = encoders["numpy"].encode(questions)
        float32 = np.concatenate([float32_m, float32_q])
        rss = {name: rss_of(name, cache_dir) for name in encoders}

        print(
            f"one core (cpu {core}); short: {len(short)} sentences of {min(tokens)}-{max(tokens)} "
            f"tokens x {args.rounds} rounds; batch: {len(batch)} memories of "
            f"{min(batch_tokens)}-{max(batch_tokens)} tokens (mean {np.mean(batch_tokens):.0f})\n"
        )
        header = (
            f"{'forward':<15}{'p50 ms':>8}{'p95 ms':>8}{'p50 new/old':>12}{'batch/s':>9}"
            f"{'new/old':>8}{'R@1':>7}{'R@5':>7}{'mixed R@1':>10}{'mixed R@5':>10}"
            f"{'cos min':>9}{'cos mean':>9}{'RssAnon MB':>11}"
        )
        print(header)
        base_p50 = np.percentile(short_times["numpy"], 50)
        base_rate = np.median(rates["numpy"])
        for name, encoder in encoders.items():
            p50 = np.percentile(short_times[name], 50)
            p95 = np.percentile(short_times[name], 95)
            rate = np.median(rates[name])
            own_m, own_q = encoder.encode(memories), encoder.encode(questions)
            r1, r5 = recall(own_m, own_q)
            m1, m5 = recall(float32_m, own_q)
            cos = (np.concatenate([own_m, own_q]) * float32).sum(1)
            mem = rss[name]["after"] - rss[name]["before"]
            print(
                f"{name:<15}{p50 * 1000:>8.2f}{p95 * 1000:>8.2f}{p50 / base_p50:>12.2f}"
                f"{rate:>9.0f}{rate / base_rate:>8.2f}{r1:>7.3f}{r5:>7.3f}{m1:>10.3f}{m5:>10.3f}"
                f"{cos.min():>9.4f}{cos.mean():>9.4f}{mem:>11.0f}"
            )
        print(
            f"\nRssAnon: a fresh process's private memory after loading the model and "
            f"embedding, minus the same before loading ({rss['numpy']['before']:.0f} MB of "
            f"Python, numpy, tokenizers and memsvc); the model files are memory-mapped and "
            f"not counted: they are the page cache, one copy per box. Converting all "
            f"models at the start took {convert_s:.1f} s."
        )

        # The query cache, in front of the shipped forward.
        workload = agent_workload(questions, 2000)
        shipped = LocalEmbedder(backend="onnx", cache_dir=cache_dir)
        shipped.warm_up()
        cached = CachedEmbedder(shipped, 256)
        cached.warm_up()
        t0 = time.perf_counter()
        for question in workload:
            shipped.embed([question])
        uncached_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for question in workload:
            cached.embed([question])
        cached_s = time.perf_counter() - t0
        distinct = len(set(workload))
        print(
            f"\nquery cache (256 entries, {SHIPPED}): {len(workload)} Zipf questions, {distinct} "
            f"distinct of 300: hit rate {cached.hits / len(workload):.1%}; "
            f"{uncached_s / len(workload) * 1000:.2f} ms per question without the cache, "
            f"{cached_s / len(workload) * 1000:.2f} ms with it ({uncached_s / cached_s:.1f}x)"
        )


if __name__ == "__main__":
    if "--rss-probe" in sys.argv:
        main()
    else:
        with recording("embedding"):
            main()
