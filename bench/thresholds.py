"""How similar do related memories and questions score? Pick `threshold` from data.

Embeds the labelled pairs in tests/data/memory_query_pairs.jsonl (a memory
and a question it answers, in other words) with the configured embedder,
and prints:
  - the similarity of each memory to its own question (related) and to
    every other question (unrelated), as percentiles;
  - recall@1 and recall@5: how often the right memory ranks first / in the
    top five among all memories for its question;
  - for a range of thresholds, the share of related pairs kept and of
    unrelated pairs let through.

    python -m bench.thresholds                    # the bundled local model
    MEMSVC_EMBEDDER=openai MEMSVC_EMBEDDING_API_KEY=... python -m bench.thresholds
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from bench.report import recording
from memsvc import settings as memsvc_settings
from memsvc.embeddings import make_embedder

PAIRS = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "memory_query_pairs.jsonl"


def settings() -> dict:
    """The embedder settings from defaults and MEMSVC_* variables, as the app reads them."""
    values, _ = memsvc_settings.load(memsvc_settings.default_instance_path())
    return values


def main() -> None:
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    embedder = make_embedder(settings())
    memories = embedder.embed([p["memory"] for p in pairs]).astype(np.float64)
    queries = embedder.embed([p["query"] for p in pairs]).astype(np.float64)
    sims = np.clip(queries @ memories.T, 0, 1)  # [query, memory]
    n = len(pairs)
    related = np.diag(sims)
    unrelated = sims[~np.eye(n, dtype=bool)]
    ranks = np.array([(sims[i] > sims[i, i]).sum() for i in range(n)])

    print(f"embedder: {embedder.model_id} ({embedder.dimensions} dimensions), {n} pairs")
    print(f"recall@1 {np.mean(ranks < 1):.2f}   recall@5 {np.mean(ranks < 5):.2f}")
    print()
    print(
        f"{'similarity':<12}"
        + "".join(f"{h:>7}" for h in ("min", "p10", "p25", "p50", "p75", "p90", "max"))
    )
    for name, values in (("related", related), ("unrelated", unrelated)):
        qs = np.percentile(values, [0, 10, 25, 50, 75, 90, 100])
        print(f"{name:<12}" + "".join(f"{q:7.2f}" for q in qs))
    print()
    print(f"{'threshold':<10}{'related kept':>14}{'unrelated passed':>18}")
    best = None
    for t in np.arange(0.20, 0.801, 0.05):
        kept = np.mean(related >= t)
        passed = np.mean(unrelated >= t)
        print(f"{t:<10.2f}{kept:>14.2f}{passed:>18.3f}")
        score = kept - passed
        if best is None or score > best[0]:
            best = (score, t, kept, passed)
    _, t, kept, passed = best
    print()
    print(
        f"best separation (related kept - unrelated passed): threshold {t:.2f} keeps "
        f"{kept:.0%} of related pairs and lets {passed:.1%} of unrelated ones through"
    )


if __name__ == "__main__":
    with recording("thresholds"):
        main()
