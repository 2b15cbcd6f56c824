"""What changed between two versions of a memory, as runs of kept, removed and added text."""

from __future__ import annotations

import difflib
import json
import re
import typing as t

#: ("same" | "del" | "ins", text): shown as plain, struck and marked text.
Run = tuple[str, str]

_TOKENS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


def words(before: str, after: str) -> list[Run]:
    """A word-level diff of two texts."""
    a, b = _TOKENS.findall(before), _TOKENS.findall(after)
    runs: list[Run] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            runs.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            runs.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            runs.append(("ins", "".join(b[j1:j2])))
    return runs


def pretty(metadata: t.Any) -> str:
    return json.dumps(metadata, ensure_ascii=False, indent=2, sort_keys=True)


def versions(history: list[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Each version (newest first) with its text and metadata diffed against the one before."""
    out = []
    previous: dict[str, t.Any] | None = None
    for v in history:
        before_text = previous["content"] if previous else ""
        before_meta = pretty(previous["metadata"]) if previous else ""
        out.append(
            {
                **v,
                "content_runs": words(before_text, v["content"]),
                "metadata_runs": words(before_meta, pretty(v["metadata"])),
                "metadata_changed": previous is None or previous["metadata"] != v["metadata"],
            }
        )
        previous = v
    return out[::-1]
