"""Keyword search over the full-text index, and how its ranking is fused with meaning.

A query becomes its words alone (never query syntax): a memory matching any
of them is a candidate, and the store ranks those matching more, and rarer,
words first. Very common English words are left out unless nothing else is
left: they match nearly everything and only add noise.
"""

from __future__ import annotations

import re

# Words, as the full-text indexes see them: runs of letters and digits.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

#: At most this many words of a query go into the expression.
MAX_WORDS = 64

STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have he her his how i if in
    into is it its me my no not of on or our she so than that the their them then there these
    they this to was we were what when where which who whom why will with you your""".split()
)

#: Hybrid scoring: a keyword match adds at most BOOST to a memory's cosine,
#: ``BOOST * s / (s + HALF)`` for match strength ``s`` (SQLite's -bm25). Chosen on memsvc's
#: labelled set (make eval): it answers more exact-term and near-miss
#: questions first than cosine alone, and loses least on paraphrases of the
#: fusions tried; reciprocal-rank fusion lost 0.17 recall@1 on paraphrases.
BOOST = 0.2
HALF = 8.0


def query_words(query: str) -> list[str]:
    """The words of ``query`` a keyword search looks for, lowercased, each once."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    kept = [w for w in words if w not in STOPWORDS] or words
    return kept[:MAX_WORDS]


def hybrid_score(cosine: float, strength: float | None) -> float:
    """Cosine, raised by a keyword match's strength (positive; larger is stronger)."""
    if strength is None:
        return cosine
    strength = max(0.0, strength)
    return cosine + BOOST * strength / (strength + HALF)
