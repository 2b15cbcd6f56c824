"""The distribution: installs as docs/clients.md says, with only what it needs, typed."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import memsvc_client
import pytest
from client_support import REPO
from client_support import blocks

DOC = REPO / "docs" / "clients.md"


def test_the_version_is_the_distributions() -> None:
    assert memsvc_client.__version__ == "0.2.0"
    assert importlib.metadata.version("memsvc-client") == memsvc_client.__version__
    requires = importlib.metadata.requires("memsvc-client") or []
    base = [r for r in requires if "extra ==" not in r]
    assert [re.split(r"[<>=!~ ;\[]", r)[0] for r in base] == ["httpx"]
    assert any(r.startswith("mcp") and 'extra == "mcp"' in r for r in requires)
    extras = {
        "langchain": "langchain-core",
        "langgraph": "langgraph",
        "llamaindex": "llama-index-core",
        "openai-agents": "openai-agents",
    }
    for extra, package in extras.items():
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in requires), extra


@pytest.mark.e2e
def test_the_documented_install_in_a_fresh_environment(tmp_path: pathlib.Path) -> None:
    (install,) = [b for b in blocks(DOC.read_text()) if "pip install ./clients/python" in b.code]
    commands = [line.split("#")[0].strip() for line in install.code.splitlines() if line.strip()]
    assert commands == ["pip install ./clients/python", "pip install './clients/python[mcp]'"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)

    def sh(command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=check,
        )

    sh(commands[0])
    installed = sh("pip list --format=freeze").stdout.lower()
    assert "memsvc-client==0.2.0" in installed and "httpx==" in installed
    for unwanted in ("flask", "numpy", "memsvc==", "mcp=="):
        assert unwanted not in installed, unwanted  # neither the server nor the MCP SDK
    where = "import memsvc_client, pathlib; print(pathlib.Path(memsvc_client.__file__).parent)"
    typed = sh(f"python -c '{where}'")
    assert (pathlib.Path(typed.stdout.strip()) / "py.typed").is_file()
    assert str(venv) in typed.stdout  # installed, not this checkout's source
    without_extra = sh("memsvc-mcp --help", check=False)
    assert without_extra.returncode == 1
    assert "pip install 'memsvc-client[mcp]'" in without_extra.stderr
    assert "Traceback" not in without_extra.stderr
    # Each framework adapter, imported without its extra, names the extra.
    for module, extra in [
        ("langchain", "langchain"),
        ("langgraph", "langgraph"),
        ("llamaindex", "llamaindex"),
        ("openai_agents", "openai-agents"),
    ]:
        imported = sh(f"python -c 'import memsvc_client.{module}'", check=False)
        assert imported.returncode == 1
        last = imported.stderr.strip().splitlines()[-1]
        assert last.startswith(f"ImportError: memsvc_client.{module} needs "), last
        assert last.endswith(f"pip install 'memsvc-client[{extra}]'"), last

    sh(commands[1])
    assert "mcp==" in sh("pip list --format=freeze").stdout.lower()
    helped = sh("memsvc-mcp --help")
    assert "MEMSVC_USER_ID" in helped.stdout
