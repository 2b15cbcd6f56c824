"""A plain Okapi BM25, computed outside memsvc: the baseline ``bench.eval`` holds every mode to.

One index per user, over that user's memories only, as memsvc's keyword
search ranks. Deliberately the textbook version, with none of memsvc's
choices: words are lower-cased runs of letters and digits, with no
stemming, no stop words and no accent folding ("INV-20418" is "inv" and
"20418"; "swims" and "swim" are two words). Each distinct query word counts
once; a memory scores

    sum over query words w it holds of
        idf(w) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average length))

with ``idf(w) = ln(1 + (N - df + 0.5) / (df + 0.5))`` (N memories, df of
them holding w), which is never negative. A memory holding none of the
query's words is not returned; equal scores go to the memory stored last,
as memsvc breaks ties.
"""

from __future__ import annotations

import collections
import math
import re
import typing as t

K1 = 1.2
B = 0.75

_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """The words of ``text``: lower-cased runs of letters and digits, in order."""
    return _WORD.findall(text.lower())


class Index:
    """BM25 over a list of documents (one user's memories, in the order stored)."""

    def __init__(self, documents: t.Sequence[str]):
        self.counts = [collections.Counter(words(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.counts]
        self.average = sum(self.lengths) / len(documents) if documents else 0.0
        self.df: collections.Counter[str] = collections.Counter()
        for counts in self.counts:
            self.df.update(counts.keys())

    def idf(self, word: str) -> float:
        n, df = len(self.counts), self.df[word]
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def score(self, query: str, i: int) -> float:
        """Document ``i``'s score for ``query`` (0 if it holds none of its words)."""
        counts = self.counts[i]
        norm = K1 * (1 - B + B * self.lengths[i] / max(self.average, 1e-9))
        total = 0.0
        for word in dict.fromkeys(words(query)):
            tf = counts.get(word, 0)
            if tf:
                total += self.idf(word) * tf * (K1 + 1) / (tf + norm)
        return total

    def search(self, query: str, limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` documents holding a query word, as (index, score), best first."""
        query_words = set(words(query))
        scored = [
            (i, self.score(query, i))
            for i, counts in enumerate(self.counts)
            if not query_words.isdisjoint(counts)
        ]
        scored.sort(key=lambda s: (-s[1], -s[0]))
        return scored[:limit]
