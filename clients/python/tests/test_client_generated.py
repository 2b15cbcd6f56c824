"""The sync client is generated from the async one, and the committed file is what it makes."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE.parent / "tools" / "async_to_sync.py"
PACKAGE = HERE.parent / "memsvc_client"


def check(source: pathlib.Path, target: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--source", str(source), "--target", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_committed_sync_client_is_what_the_script_makes_of_the_async_one() -> None:
    done = check(PACKAGE / "aio.py", PACKAGE / "client.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_generated_client_has_no_async_left_and_says_it_is_generated() -> None:
    client = (PACKAGE / "client.py").read_text()
    assert client.startswith("# Generated from aio.py by clients/python/tools/async_to_sync.py")
    for word in ("async ", "await ", "anyio", "AsyncMemsvc", "AsyncClient", "aclose"):
        assert word not in client, word


def test_the_check_fails_when_the_sync_client_was_edited_by_hand(tmp_path: pathlib.Path) -> None:
    # A check that cannot fail checks nothing: an edit to client.py alone is caught...
    shutil.copy(PACKAGE / "aio.py", tmp_path / "aio.py")
    client = (PACKAGE / "client.py").read_text().replace("retries: int = 3", "retries: int = 4")
    (tmp_path / "client.py").write_text(client)
    done = check(tmp_path / "aio.py", tmp_path / "client.py")
    assert done.returncode == 1 and "retries: int = 4" in done.stdout, done.stdout
    # ...and so is an edit to aio.py whose client.py was not generated again.
    shutil.copy(PACKAGE / "client.py", tmp_path / "client.py")
    source = (PACKAGE / "aio.py").read_text().replace("timeout: float = 30", "timeout: float = 5")
    (tmp_path / "aio.py").write_text(source)
    done = check(tmp_path / "aio.py", tmp_path / "client.py")
    assert done.returncode == 1 and "timeout: float = 5.0" in done.stdout, done.stdout
