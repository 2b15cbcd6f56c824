"""Words as the keyword index sees them: one analysis for memories and queries, on every store.

A text becomes a list of *terms*:

* it is normalised (NFKC, case-folded, accents on Latin, Greek and Cyrillic
  letters removed: "Café" and "cafe" are one word);
* words are runs of letters and digits; punctuation separates them
  ("INV-0234" is "inv" and "0234");
* English words (letters a-z only) are stemmed with the Snowball English
  stemmer, so "swimming", "swims" and "swim" are one term; names and codes
  with digits are kept as they are;
* scripts written without spaces between words (Chinese, Japanese, Korean,
  Thai, Lao, Khmer, Myanmar) are indexed as overlapping pairs of
  characters, so a two-character word is found inside a sentence
  ("北京大学" holds "北京", "京大", "大学");
* a term is at most :data:`MAX_TERM_CHARS` characters.

Terms are stored as 64-bit hashes (:func:`term_hash`): the index holds no
text, and a word erased from every memory leaves no readable trace in it.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import re
import unicodedata

import snowballstemmer

#: Longer words (a pasted token, a base64 blob) are cut to this many characters.
MAX_TERM_CHARS = 64
#: At most this many distinct terms of a query are looked up.
MAX_QUERY_TERMS = 64

#: Scripts without spaces between words: indexed as character pairs.
_PAIRED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff"  # Hangul Jamo
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
# Letters and digits, plus the combining vowel signs of the scripts above and
# of Indic scripts (not letters to Python's re, but part of their words).
_MARKS = "\u0900-\u0dff\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
_WORD = re.compile(rf"(?:[^\W_]|[{_MARKS}])+")
#: :data:`_WORD` in ASCII text (no marks there), several times faster to match.
_ASCII_WORD = re.compile("[0-9A-Za-z]+")
_SEGMENT = re.compile(rf"[{_PAIRED}]+|[^{_PAIRED}]+")
_PAIRED_CHAR = re.compile(f"[{_PAIRED}]")
_ACCENTS = re.compile("[\u0300-\u036f]")

STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have he her his how i if in
    into is it its me my no not of on or our she so than that the their them then there these
    they this to was we were what when where which who whom why will with you your
    s t d ll m re ve""".split()  # and what is left of contractions: what's, don't, we'll
)

#: PyStemmer's C build where it is installed (a dependency of memsvc), the
#: pure-Python one otherwise: the same stems, 15-20 times faster.
_stemmer = snowballstemmer.stemmer("english")


def normalise(text: str) -> str:
    """Compatibility forms folded, lower case, no accents on Latin, Greek or Cyrillic letters."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFD", text)))


def words(text: str) -> list[str]:
    """The words of ``text`` before stemming, in order (character pairs for paired scripts)."""
    text = normalise(text)
    if text.isascii():
        return [run[:MAX_TERM_CHARS] for run in _ASCII_WORD.findall(text)]
    out: list[str] = []
    for run in _WORD.findall(text):
        if run.isascii():
            out.append(run[:MAX_TERM_CHARS])
            continue
        for segment in _SEGMENT.findall(run):
            if _PAIRED_CHAR.match(segment):
                if len(segment) == 1:
                    out.append(segment)
                else:
                    out.extend(segment[i : i + 2] for i in range(len(segment) - 1))
            else:
                out.append(segment[:MAX_TERM_CHARS])
    return out


@functools.lru_cache(maxsize=1 << 17)
def _term(word: str) -> int:
    """The hash of a word's stem (English words) or of the word itself."""
    if word.isascii() and word.isalpha() and len(word) > 2:
        word = _stemmer.stemWord(word)
    return term_hash(word)


def term_hash(term: str) -> int:
    """A term as a signed 64-bit integer, as the index stores it."""
    digest = hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def terms(text: str) -> list[int]:
    """Every term of ``text`` the index holds, in order, repeats included.

    Very common English words (:data:`STOPWORDS`) are not terms: they match
    nearly everything, add only noise to a ranking, and would make a third
    of the index.
    """
    return [_term(w) for w in words(text) if w not in STOPWORDS]


def counts(text: str) -> tuple[dict[int, int], int]:
    """How often each term occurs in ``text``, and how many terms it has in all."""
    found = terms(text)
    return dict(collections.Counter(found)), len(found)


def query_terms(text: str) -> list[int]:
    """The distinct terms a keyword search for ``text`` looks up, in order (at most 64)."""
    return list(codes(text))


def codes(text: str) -> dict[int, bool]:
    """:func:`query_terms` of ``text``, each saying whether it holds a digit.

    A term with a digit is a code, a number or a date: in a question, what
    the answer most often hinges on.
    """
    out: dict[int, bool] = {}
    for word in words(text):
        if word not in STOPWORDS and len(out) < MAX_QUERY_TERMS:
            term = _term(word)
            out[term] = out.get(term, False) or any(c.isdigit() for c in word)
    return out
