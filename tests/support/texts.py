"""Long texts made on the spot, the same for a given seed: English prose and Chinese.

English: the memories of the users of ``tests/data/eval`` who write English
only (640 sentences an assistant would store) in a random order, as one
text. Chinese: random characters of the
CJK Unified Ideographs block (U+4E00 to U+9FA5, every common character
among them) in phrases of 4 to 30, separated by full-width commas and ended
by full-width full stops, as Chinese prose is punctuated. Nothing is
downloaded.
"""

from __future__ import annotations

import functools
import json
import pathlib
import random

EVAL = pathlib.Path(__file__).resolve().parents[1] / "data" / "eval"
CJK_FIRST, CJK_LAST = 0x4E00, 0x9FA5


@functools.cache
def _sentences() -> tuple[str, ...]:
    out = []
    for path in sorted(EVAL.glob("*.jsonl")):
        memories = [json.loads(line) for line in path.read_text().splitlines()]
        memories = [item for item in memories if item["kind"] == "memory"]
        # A memory in another language carries its own; its user writes
        # more than English.
        if not any("language" in item for item in memories):
            out += [item["content"] for item in memories]
    return tuple(out)


def english(chars: int, seed: int = 1) -> str:
    """``chars`` characters of varied English prose, cut at a word's end where it can."""
    rng = random.Random(seed)
    sentences = _sentences()
    parts: list[str] = []
    length = -1
    while length < chars:
        sentence = rng.choice(sentences)
        parts.append(sentence)
        length += len(sentence) + 1
    text = " ".join(parts)[:chars]
    return text if text[-1] != " " else text[:-1] + "."


def chinese(chars: int, seed: int = 2) -> str:
    """``chars`` characters of varied Chinese: random ideographs in punctuated phrases."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < chars:
        out.extend(chr(rng.randint(CJK_FIRST, CJK_LAST)) for _ in range(rng.randint(4, 30)))
        out.append("。" if rng.random() < 0.3 else "，")
    return "".join(out[:chars])


def typical(seed: int = 3) -> str:
    """A memory of about 300 characters: a few related sentences."""
    return english(300, seed)
