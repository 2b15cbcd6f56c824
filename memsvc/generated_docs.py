"""Blocks of docs/ written from the code by ``make docs``: each between two marker lines.

A page keeps its prose around the block; only what lies between the start
marker and the end marker is replaced, so the table or text there is the
code's own and a test can compare it with what the code writes now.
"""

from __future__ import annotations


def block(text: str, start: str, end: str) -> str:
    """What ``text`` holds between the ``start`` and ``end`` markers (ValueError: none)."""
    first = text.index(start) + len(start)
    return text[first : text.index(end, first)]


def write(path: str, start: str, end: str, body: str) -> None:
    """Replace the block between ``start`` and ``end`` in the file at ``path`` with ``body``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    first = text.index(start) + len(start)
    last = text.index(end, first)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:first] + "\n" + body + "\n" + text[last:])
