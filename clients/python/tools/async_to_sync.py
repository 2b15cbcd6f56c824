"""Write the synchronous client, ``memsvc_client/client.py``, from the asynchronous ``aio.py``.

``aio.py`` is the source: the two clients differ only in being sync or
async, so one is written and the other derived, token by token:

- ``async def``/``async with``/``async for`` lose ``async``; ``await`` goes;
- names in :data:`NAMES` are renamed (``AsyncMemsvc`` -> ``Memsvc``,
  ``anyio.sleep`` -> ``time.sleep``...), in code, strings and comments;
- the few lines that say something else in sync code (docstrings, the lock)
  are replaced as :data:`LINES` says; each must be found exactly once, so
  editing one of them in ``aio.py`` fails here until this table follows.

Comments and layout are kept; the result is then sorted and formatted by
ruff, as ``make format`` would. Run it after editing ``aio.py``::

    python clients/python/tools/async_to_sync.py          # rewrite client.py
    python clients/python/tools/async_to_sync.py --check  # exit 1 if it is stale

``clients/python/tests/test_client_generated.py`` runs the check.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import pathlib
import re
import subprocess
import sys
import tokenize

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "memsvc_client"
SOURCE = PACKAGE / "aio.py"
TARGET = PACKAGE / "client.py"

HEADER = (
    "# Generated from aio.py by clients/python/tools/async_to_sync.py: do not edit.\n"
    "# Edit aio.py, then run that script.\n"
)
DOCSTRING = '"""The synchronous client, :class:`Memsvc`."""'

#: Dotted names (or single names) and what they become in sync code.
NAMES = {
    "AsyncMemsvc": "Memsvc",
    "AsyncClient": "Client",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
    "anyio.sleep": "time.sleep",
}

#: The undotted names of NAMES, as words inside strings and comments.
WORDS = re.compile(r"\b(" + "|".join(n for n in NAMES if "." not in n) + r")\b")

#: Whole lines of aio.py (stripped) and the lines that replace them (same indentation).
LINES: dict[str, list[str]] = {
    "import anyio": ["import threading", "import time"],
    '"""A memsvc client for async code: the methods of :class:`Memsvc`, as coroutines."""': [
        '"""A memsvc client; safe to share between threads. Use it as a context manager."""'
    ],
    "# Made on first use: an anyio lock belongs to the event loop running then.": [],
    "self._lock: anyio.Lock | None = None": ["self._lock = threading.Lock()"],
    '"""Every memory of the user, newest first, fetched page by page (``async for``)."""': [
        '"""Every memory of the user, newest first, fetched page by page."""'
    ],
    # An async generator cannot ``yield from``.
    "for memory in page:": ["yield from page"],
    "yield memory": [],
    '"""Every end user of the tenant who has memories, by id, page by page (``async for``)."""': [
        '"""Every end user of the tenant who has memories, by id, page by page."""'
    ],
    "for user in page:": ["yield from page"],
    "yield user": [],
    '"""Every session of the user, latest first, page by page (``async for``)."""': [
        '"""Every session of the user, latest first, page by page."""'
    ],
    "for found in page:": ["yield from page"],
    "yield found": [],
    '"""Every message of a session in order, page by page (``async for``)."""': [
        '"""Every message of a session in order, page by page."""'
    ],
    "for message in page:": ["yield from page"],
    "yield message": [],
    '"""Every extraction job of the tenant, newest first, page by page (``async for``)."""': [
        '"""Every extraction job of the tenant, newest first, page by page."""'
    ],
    "for job in page:": ["yield from page"],
    "yield job": [],
    "if self._lock is None:": [],
    "self._lock = anyio.Lock()": [],
    "async with self._lock:  # one service.info for all the tasks that get here": [
        "with self._lock:  # one service.info for all the threads that get here"
    ],
}


def generate(source: str, *, filename: str = str(TARGET)) -> str:
    """The sync module for the async module ``source``, formatted."""
    code = _replace_docstring(source)
    code = _replace_lines(code)
    code = _rewrite_tokens(code)
    return _ruff(code, filename)


def _replace_docstring(source: str) -> str:
    first = ast.parse(source).body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), "no docstring"
    assert first.end_lineno is not None
    lines = source.splitlines(keepends=True)
    return HEADER + DOCSTRING + "\n" + "".join(lines[first.end_lineno :])


def _replace_lines(source: str) -> str:
    out = []
    used = dict.fromkeys(LINES, 0)
    for line in source.splitlines(keepends=True):
        stripped = line.strip()
        if stripped in LINES:
            used[stripped] += 1
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + new + "\n" for new in LINES[stripped]]
        else:
            out.append(line)
    wrong = {line: n for line, n in used.items() if n != 1}
    if wrong:
        raise SystemExit(
            "async_to_sync.py: each line of LINES must be in aio.py exactly once; "
            f"update the table: {wrong}"
        )
    return "".join(out)


def _rewrite_tokens(source: str) -> str:
    """``async``/``await`` dropped and NAMES renamed, by the tokens' own positions."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(position: tuple[int, int]) -> int:
        return offsets[position[0] - 1] + position[1]

    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), in order
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            # The keyword and the space after it.
            edits.append((at(tok.start), at(tokens[i + 1].start), ""))
        elif tok.type == tokenize.NAME:
            # The longest dotted name starting here that NAMES knows.
            j, dotted = i, tok.string
            best = (i, NAMES.get(dotted))
            while (
                j + 2 < len(tokens)
                and tokens[j + 1].string == "."
                and tokens[j + 2].type == tokenize.NAME
            ):
                j += 2
                dotted += "." + tokens[j].string
                if dotted in NAMES:
                    best = (j, NAMES[dotted])
            end, new = best
            if new is not None:
                edits.append((at(tok.start), at(tokens[end].end), new))
                i = end
        elif tok.type in TEXT_TOKENS and WORDS.search(tok.string):
            new = WORDS.sub(lambda m: NAMES[m.group(1)], tok.string)
            edits.append((at(tok.start), at(tok.end), new))
        i += 1
    out, last = [], 0
    for start, end, new in edits:
        out += [source[last:start], new]
        last = end
    out.append(source[last:])
    return "".join(out)


#: Tokens whose text may name things: strings (f-strings' literal parts too) and comments.
TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}


def _ruff(code: str, filename: str) -> str:
    """``code`` with its imports sorted and formatted, by the project's ruff settings."""
    ruff = [sys.executable, "-m", "ruff"]
    for args in (["check", "--select", "I", "--fix", "--quiet"], ["format", "--quiet"]):
        done = subprocess.run(
            [*ruff, *args, "--stdin-filename", filename, "-"],
            input=code,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"ruff {args[0]} failed on the generated code:\n{done.stderr}")
        code = done.stdout
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is stale")
    parser.add_argument("--source", type=pathlib.Path, default=SOURCE)
    parser.add_argument("--target", type=pathlib.Path, default=TARGET)
    args = parser.parse_args()
    expected = generate(args.source.read_text())
    if not args.check:
        args.target.write_text(expected)
        return 0
    current = args.target.read_text() if args.target.exists() else ""
    if current == expected:
        return 0
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        expected.splitlines(keepends=True),
        f"{args.target} (committed)",
        f"{args.target} (generated from {args.source.name})",
    )
    sys.stdout.writelines(diff)
    print(f"\n{args.target} is stale: run python clients/python/tools/async_to_sync.py")
    return 1


if __name__ == "__main__":
    sys.exit(main())
