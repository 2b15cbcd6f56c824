"""memsvc_client.llamaindex's tests, run in the LlamaIndex virtualenv.

llama-index-core needs marshmallow 3 (through dataclasses-json) and memsvc's
server marshmallow 4, so LlamaIndex cannot be installed beside the server:
``make install-test`` makes ``.venv-llamaindex`` (memsvc-client with its
``llamaindex`` extra, pytest, mypy) and this test runs ``tests/llamaindex``
there, with this virtualenv's ``memsvc`` on its PATH for the servers they start.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from client_support import REPO

pytestmark = pytest.mark.e2e

VENV = REPO / ".venv-llamaindex"
TESTS = pathlib.Path(__file__).resolve().parent / "llamaindex"
#: The tests of tests/llamaindex: all must run and pass, none skipped.
COUNT = 6


def test_the_llamaindex_adapter_passes_its_tests_on_llama_index_core() -> None:
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"needs {VENV.name}: run `make install-test` (make test does)")
    here = pathlib.Path(sys.executable).parent  # this virtualenv's memsvc command
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}{os.pathsep}{here}"
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert re.fullmatch(rf"{COUNT} passed in [\d.]+s( \(.*\))?", summary), done.stdout[-3000:]
