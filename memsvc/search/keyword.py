"""Keyword search over the full-text index, and how its ranking is fused with meaning.

A query becomes an FTS5 expression from its words alone: each word quoted
(so punctuation, ``AND``, ``NEAR``, ``*`` or quotes in the text never act as
query syntax) and the words OR-joined (a memory matching any of them is a
candidate; bm25 ranks those matching more, and rarer, words first). Very
common English words are left out unless nothing else is left: they match
nearly everything and only add noise.
"""

from __future__ import annotations

import re

# Words, as FTS5's unicode61 tokenizer sees them: runs of letters and digits.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

#: At most this many words of a query go into the expression.
MAX_WORDS = 64

STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have he her his how i if in
    into is it its me my no not of on or our she so than that the their them then there these
    they this to was we were what when where which who whom why will with you your""".split()
)

#: Hybrid scoring: a keyword match adds at most BOOST to a memory's cosine,
#: ``BOOST * s / (s + HALF)`` for bm25 strength ``s``. Chosen on memsvc's
#: labelled set (make eval): it answers more exact-term and near-miss
#: questions first than cosine alone, and loses least on paraphrases of the
#: fusions tried; reciprocal-rank fusion lost 0.17 recall@1 on paraphrases.
BOOST = 0.2
HALF = 8.0


def match_expression(query: str) -> str | None:
    """An FTS5 ``content`` expression for the words of ``query``; None if it has none."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    kept = [w for w in words if w not in STOPWORDS] or words
    if not kept:
        return None
    quoted = " OR ".join('"' + w.replace('"', '""') + '"' for w in kept[:MAX_WORDS])
    return f"content : ({quoted})"


def hybrid_score(cosine: float, bm25: float | None) -> float:
    """Cosine, raised by a keyword match's strength (FTS5's bm25: lower is stronger)."""
    if bm25 is None:
        return cosine
    strength = max(0.0, -bm25)
    return cosine + BOOST * strength / (strength + HALF)
