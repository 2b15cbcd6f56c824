"""bench.search's timings for two or more commits, in one run, interleaved: before/after.

Each commit's code is checked out (``git archive``) into a folder of its
own and runs in a process of its own (:mod:`bench.before_after_worker`, which works
with either form of the search API), on its own copy of bench.search's
workload (a large user with ``--large`` memories among 2,000 users of 20,
1536 dimensions, the same seed). The coordinator then asks each process in
turn, in rounds, for a batch of searches, alternating which goes first, so
that what else the machine is doing falls on every commit alike. Timings:

  small first          a small user's first search (it loads the user)
  small warm           the search right after it (bench.search's "warm")
  small 2nd warm       the one after that
  small steady         a search of the same user a few searches on
  large warm           the large user's warm search
  large after a write  the large user, right after a write by another connection
  small after a write  a cached small user, right after a write

p50 over every round, p95, and each commit's p50 as a ratio to the first
commit's; "per round" is the median of the rounds' ratios of p50s. Each
timing twice: wall-clock, and the CPU time of the searching thread ("cpu"),
which other processes on the machine disturb less.

    python -m bench.before_after REF [REF...] [--rounds 30] [--batch 20] [--large 10000]

``.`` is the work tree as it is (uncommitted changes included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

from bench.report import recording

REPO = pathlib.Path(__file__).resolve().parents[1]
WORKER = pathlib.Path(__file__).with_name("before_after_worker.py")

SCENARIOS = {"small": 1, "large": 2, "write": 4}  # what a batch asks, per search of a small user


def checkout(ref: str, into: pathlib.Path) -> pathlib.Path:
    """The code at ``ref`` in a folder of its own (``.``: this work tree)."""
    if ref == ".":
        return REPO
    into.mkdir()
    archive = subprocess.run(
        ["git", "archive", ref], cwd=REPO, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


class Tree:
    """One commit's worker process."""

    def __init__(self, ref: str, folder: pathlib.Path, n_large: int, tmp: str):
        self.ref = ref
        env = dict(os.environ, PYTHONPATH=str(folder), OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER.read_text(), str(n_large), tmp],
            cwd=folder, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.folder = folder
        self.samples: dict[str, list[float]] = {}
        self.rounds: list[dict[str, float]] = []

    def ready(self) -> None:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        loaded = json.loads(line)["ready"]
        if not loaded.startswith(str(self.folder)):
            raise RuntimeError(f"{self.ref}: memsvc came from {loaded}, not {self.folder}")

    def ask(self, what: str, count: int) -> dict[str, list[float]]:
        self.proc.stdin.write(json.dumps({"what": what, "count": count}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        got = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
        for name, times in got.items():
            self.samples.setdefault(name, []).extend(times)
        return got

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("refs", nargs="+")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--large", type=int, default=10000)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    args = parser.parse_args()
    scenarios = args.only.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        trees = [
            Tree(ref, checkout(ref, pathlib.Path(tmp) / f"tree{i}"), args.large, tmp)
            for i, ref in enumerate(args.refs)
        ]
        try:
            for tree in trees:
                tree.ready()
            for r in range(args.rounds):
                order = trees if r % 2 == 0 else trees[::-1]
                for what in scenarios:
                    count = max(1, args.batch // SCENARIOS[what])
                    got = {tree.ref: tree.ask(what, count) for tree in order}
                    for tree in trees:
                        tree.rounds.append(
                            {name: float(np.median(v)) for name, v in got[tree.ref].items()}
                        )
        finally:
            for tree in trees:
                tree.close()
    report(trees, args)


def describe(ref: str) -> str:
    """A commit's short id and subject; ``.``: the work tree."""
    if ref == ".":
        return "the work tree"
    return subprocess.run(
        ["git", "log", "-1", "--format=%h %s", ref], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()[:90]


def report(trees: list[Tree], args: argparse.Namespace) -> None:
    base = trees[0]
    print(
        f"bench.search's workload (large user {args.large:,}), {args.rounds} rounds, "
        f"commits in turn; ratios to {base.ref}"
    )
    for tree in trees:
        print(f"  {tree.ref:<12}{describe(tree.ref)}")
    print(f"{'timing':<26}{'commit':<14}{'n':>6}{'p50 ms':>9}{'p95 ms':>9}{'x p50':>8}"
          f"{'per round':>11}")  # fmt: skip
    for name in base.samples:
        b50 = float(np.median(base.samples[name]))
        for tree in trees:
            times = tree.samples[name]
            p50, p95 = float(np.median(times)), float(np.percentile(times, 95))
            per_round = [
                mine[name] / theirs[name]
                for mine, theirs in zip(tree.rounds, base.rounds, strict=True)
                if name in mine
            ]
            print(
                f"{name:<26}{tree.ref[:12]:<14}{len(times):>6}{p50:>9.3f}{p95:>9.3f}"
                f"{p50 / b50:>8.2f}{float(np.median(per_round)):>11.2f}"
            )


if __name__ == "__main__":
    with recording("before_after"):
        main()
