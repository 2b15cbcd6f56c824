"""Benchmark results on record: what a run printed, with its date, commit and command.

Every benchmark's ``main`` runs inside :func:`recording`, which passes its
output through to the terminal and also writes it to
``bench/results/<name>.txt`` under a header saying when, at which commit,
on what machine and with which command it was made. The performance docs
quote these files.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import typing as t

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
REPO = RESULTS.parents[1]


def commit() -> str:
    """The checked-out commit, ``-dirty`` if the work tree has changes."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            # Earlier results being rewritten do not make the code dirty.
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


class _Tee(io.TextIOBase):
    def __init__(self, *streams: t.TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


@contextlib.contextmanager
def recording(name: str) -> t.Iterator[None]:
    """Print as usual, and save what was printed as ``bench/results/<name>.txt``."""
    started = datetime.datetime.now(datetime.UTC)
    at = commit()  # before the run: the tree may change while it goes on
    captured = io.StringIO()
    terminal = sys.stdout
    sys.stdout = _Tee(terminal, captured)  # type: ignore[assignment]
    failed: BaseException | None = None
    try:
        yield
    except BaseException as e:
        failed = e
        raise
    finally:
        sys.stdout = terminal
        command = "python -m bench." + name + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
        header = (
            f"# {name}: {started:%Y-%m-%d %H:%M} UTC, commit {at}\n# {machine()}\n# {command}\n\n"
        )
        ended = ""
        if failed is not None and not (isinstance(failed, SystemExit) and not failed.code):
            ended = f"\n(the run ended early: {type(failed).__name__} {failed})\n"
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{name}.txt").write_text(header + captured.getvalue() + ended)
        print(f"\n(saved to bench/results/{name}.txt)")


#: In docs/performance.md, a results file is quoted between these lines.
QUOTE_START = "<!-- results: bench/results/{name}.txt (make docs) -->"
QUOTE_END = "<!-- end of results -->"


def quoted(page: str) -> str:
    """``page`` with every quoted results file replaced by the file's current text."""
    out, rest = [], page
    while True:
        start = rest.find("<!-- results: bench/results/")
        if start < 0:
            return "".join(out) + rest
        line_end = rest.index("-->", start) + 3
        name = rest[start:line_end].split("bench/results/", 1)[1].split(".txt", 1)[0]
        end = rest.index(QUOTE_END, line_end)
        text = (RESULTS / f"{name}.txt").read_text()
        out.append(rest[:line_end] + "\n```\n" + text.rstrip("\n") + "\n```\n")
        rest = rest[end:]
        out.append(rest[: len(QUOTE_END)])
        rest = rest[len(QUOTE_END) :]


def write_docs(path: str | os.PathLike[str]) -> None:
    """Refresh the results quoted in ``path`` (docs/performance.md) from bench/results/."""
    page = pathlib.Path(path)
    page.write_text(quoted(page.read_text()))
