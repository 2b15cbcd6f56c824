"""Real gunicorn servers on free loopback ports, with the checked-in config.

Used by the end-to-end and reliability tests and by the benchmarks.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import typing as t

import pytest
import requests

REPO = pathlib.Path(__file__).resolve().parents[2]

#: Where every test app and server keeps the bundled model converted for
#: ONNX Runtime: converting takes a second or two, once per machine.
MODEL_CACHE = os.path.join(tempfile.gettempdir(), f"memsvc-test-models-{os.getuid()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Server:
    url: str
    proc: subprocess.Popen
    env: dict[str, str]
    log: pathlib.Path

    @property
    def trpc(self) -> str:
        return self.url + "/trpc"

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "memsvc.cli", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )

    def create_key(self, tenant: str = "tenant-A", name: str = "e2e") -> str:
        return self.cli("keys", "create", tenant, name).stdout.strip()

    def token(self, tenant: str = "tenant-A") -> str:
        return self.cli("token", tenant).stdout.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def server_env(db_path: pathlib.Path, port: int, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSVC_")}
    env.update(
        {
            "MEMSVC_DATABASE": str(db_path),
            "MEMSVC_BIND": f"127.0.0.1:{port}",
            "WEB_CONCURRENCY": "2",
            "MEMSVC_JWT_SECRET": secrets.token_urlsafe(32),
            "MEMSVC_LIMITS_DIR": str(db_path.parent / "limits"),
            "MEMSVC_MODEL_CACHE_DIR": MODEL_CACHE,
        }
    )
    env.update(settings)
    return env


def start_server(
    tmp: pathlib.Path,
    *,
    deadline: float = 90,
    app: str = "wsgi:app",
    ready: str = "/health",
    **settings: str,
) -> Server:
    port = free_port()
    env = server_env(tmp / "memsvc.sqlite3", port, **settings)
    log = tmp / f"gunicorn-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", app],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", proc, env, log)
    if not serving(proc, server.url + ready, deadline, server.output):
        server.stop()
        pytest.fail(f"gunicorn did not answer {ready} within {deadline}s:\n{server.output()}")
    return server


def serving(proc: subprocess.Popen, url: str, deadline: float, output: t.Callable[[], str]) -> bool:
    """Whether ``url`` answers 200 within ``deadline`` seconds; fails if gunicorn exits."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"gunicorn exited with {proc.returncode}:\n{output()}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return True
        except (requests.ConnectionError, requests.Timeout):
            pass  # not listening yet, or too busy starting to answer within 2 s
        time.sleep(0.1)
    return False


class KillableServer:
    """gunicorn in a session of its own, so one signal reaches the master and every worker."""

    def __init__(self, tmp: pathlib.Path, **settings: str):
        self.tmp = tmp
        self.db = tmp / "memsvc.sqlite3"
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.logs: list[pathlib.Path] = []

    def env(self, port: int) -> dict[str, str]:
        return server_env(self.db, port, **self.settings)

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "memsvc.cli", *args],
            env=self.env(free_port()),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return result.stdout.strip()

    def start(self, deadline: float = 90) -> str:
        port = free_port()
        log = self.tmp / f"gunicorn-{len(self.logs)}-{port}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "wsgi:app"],
                cwd=REPO,
                env=self.env(port),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}"
        if not serving(self.proc, url + "/health", deadline, self.output):
            self.kill()
            pytest.fail(f"gunicorn did not answer /health within {deadline}s:\n{self.output()}")
        self.url = url
        return url

    def kill(self) -> None:
        """SIGKILL to the whole process group: no worker gets to finish anything."""
        assert self.proc is not None
        self.url = None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        # Workers are reaped by init, not by us: wait until none is left.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        pytest.fail("gunicorn workers outlived SIGKILL of their process group")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.url = None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    def output(self) -> str:
        return "\n".join(log.read_text(errors="replace")[-4000:] for log in self.logs[-2:])

    def workers(self) -> list[int]:
        """The pids of the master's workers now."""
        assert self.proc is not None
        pid = self.proc.pid
        try:
            children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except FileNotFoundError:
            return []
        return [int(c) for c in children.split()]
