"""The docs' examples, run as written against a real server, answers compared.

Each document's ``sh`` blocks run in order in one bash session (so a
variable set in one block is there in the next), in a fresh folder, with the
server's settings in the environment and ``http://127.0.0.1:8000`` pointing
at the test server. A ``js`` block that starts with ``// <file>: ...`` is
saved as that file first. A block's output must match the ``json`` (or
plain) block right after it, once ids, secrets and times are masked and
numbers compared within 0.02 (int8 inference differs a little between CPUs); a
memory's dates are masked too (resolved against the day of the run). A block preceded by
``<!-- not run -->`` is not run.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import typing as t

import pytest

from tests.support.servers import REPO
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

MARK = "@@@ block "
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
MASKS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"), "<time>"),
    # A memory's dates are resolved against the day it is stored.
    (re.compile(r'"(start|end)":"\d{4}-\d\d-\d\d"'), r'"\1":"<date>"'),
    (re.compile(r"sk_memsvc_[0-9a-f]{64}"), "<secret>"),
    (re.compile(r"key_[0-9a-f]{16}"), "<key-id>"),
    (re.compile(r'"timestamp":\d+'), '"timestamp":0'),
]


class Block(t.NamedTuple):
    lang: str
    code: str
    run: bool
    line: int


def blocks(text: str) -> list[Block]:
    out = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().splitlines()
        skip = bool(before) and before[-1].strip() == "<!-- not run -->"
        line = text.count("\n", 0, match.start()) + 1
        out.append(Block(match.group(1), match.group(2), not skip, line))
    return out


def script(doc: list[Block], url: str) -> tuple[str, list[tuple[int, Block | None]]]:
    """A bash script running ``doc``'s runnable blocks, and what each should print."""
    bin_dir = os.path.dirname(sys.executable)
    lines = ["set -euo pipefail"]
    expected: list[tuple[int, Block | None]] = []
    for i, block in enumerate(doc):
        if not block.run:
            continue
        code = block.code.replace("http://127.0.0.1:8000", url).replace(".venv/bin/", bin_dir + "/")
        if block.lang == "js":
            name = re.match(r"// ([\w.-]+):", code)
            if name:
                lines.append(f"cat > {name.group(1)} <<'MEMSVC_DOC_EOF'\n{code}MEMSVC_DOC_EOF")
            continue
        if block.lang != "sh":
            continue
        following = doc[i + 1] if i + 1 < len(doc) else None
        answer = following if following is not None and following.lang in ("json", "") else None
        lines.append(f"echo '{MARK}{len(expected)}'")
        lines.append(code)
        expected.append((block.line, answer))
    return "\n".join(lines) + "\n", expected


def masked(text: str) -> str:
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return text.strip()


def same(got: t.Any, want: t.Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and abs(got - want) < 0.02
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and list(got) == list(want)
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    return got == want


def run_document(path: pathlib.Path, server: t.Any, tmp_path: pathlib.Path) -> None:
    doc = blocks(path.read_text())
    code, expected = script(doc, server.url)
    assert expected, f"{path} has no runnable examples"
    env = {**server.env, "npm_config_prefer_offline": "true", "npm_config_fund": "false"}
    result = subprocess.run(
        ["bash", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    outputs = result.stdout.split(MARK)[1:]
    assert result.returncode == 0 and len(outputs) == len(expected), (
        f"{path.name}: the example at line {expected[len(outputs) - 1][0]} failed:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    for (line, answer), output in zip(expected, outputs, strict=True):
        output = output.split("\n", 1)[1] if "\n" in output else ""
        if answer is None:
            continue
        got, want = masked(output), masked(answer.code)
        if answer.lang == "json":
            assert same(json.loads(got), json.loads(want)), (
                f"{path.name}, example at line {line}:\n got: {got}\nwant: {want}"
            )
        else:
            assert got == want, f"{path.name}, example at line {line}:\n got: {got}\nwant: {want}"


@pytest.mark.parametrize("name", ["README.md", "docs/api.md"])
def test_the_documented_examples_run_and_answer_as_shown(server, tmp_path, name):
    run_document(REPO / name, server, tmp_path)


NUMBER = re.compile(r"-?\d+\.\d+")


def test_the_python_quick_start_shows_its_own_answers_after_the_walk_through(tmp_path):
    # A reader who did the README's walk-through, then runs the Python client's
    # quick start of docs/clients.md with the same key (tenant acme), sees what
    # the doc shows: the example finds only what it added itself.
    (tmp_path / "server").mkdir()
    server = start_server(tmp_path / "server")
    try:
        walk_through, _ = script(blocks((REPO / "README.md").read_text()), server.url)
        doc = blocks((REPO / "docs" / "clients.md").read_text())
        (i, quick_start), *_ = [(i, b) for i, b in enumerate(doc) if b.lang == "python"]
        shown = doc[i + 1]
        assert shown.lang == "text"
        code = quick_start.code.replace("http://127.0.0.1:8000", server.url)
        (tmp_path / "quick_start.py").write_text(code)
        run = (
            f"{{\n{walk_through}}} > /dev/null\n"
            f'MEMSVC_API_KEY="$KEY" {sys.executable} quick_start.py\n'
        )
        result = subprocess.run(
            ["bash", "-c", run],
            cwd=tmp_path,
            env=server.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    got, want = result.stdout.strip(), shown.code.strip()
    assert NUMBER.sub("<n>", got) == NUMBER.sub("<n>", want), f"got:\n{got}\nwant:\n{want}"
    pairs = zip(NUMBER.findall(got), NUMBER.findall(want), strict=True)
    assert all(abs(float(g) - float(w)) < 0.02 for g, w in pairs), got


def test_the_harness_catches_a_wrong_answer(server, tmp_path):
    doc = tmp_path / "wrong.md"
    doc.write_text(
        "```sh\ncurl -s http://127.0.0.1:8000/health\n```\n"
        '```json\n{"status":"degraded","db":"connected","timestamp":1}\n```\n'
    )
    with pytest.raises(AssertionError, match="degraded"):
        run_document(doc, server, tmp_path)
