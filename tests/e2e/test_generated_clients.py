"""docs/clients.md's generated clients: each generated from a live document, compiled and run.

Each ``###`` section of "Generated clients" runs in a fresh folder, as a
reader would run it: a ``ts``, ``python`` or ``yaml`` block whose first line
is ``// <file>: ...`` or ``# <file>: ...`` is saved as that file, the ``sh``
blocks run in order in one bash session (the generator, ``tsc --strict`` or
``mypy --strict``, the script), and what a block prints must be the ``text``
block shown after it. The install blocks (``<!-- not run -->``) must name the
versions this repository installs: tests/e2e/generators/package.json for npm
(its node_modules stands in for the reader's ``npm install``), setup.cfg's
``test`` extra for PyPI (this virtualenv's bin comes first on the PATH).

The document itself must generate cleanly: no warning from
openapi-python-client, none from Redocly's lint.
"""

from __future__ import annotations

import configparser
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import typing as t

import pytest
import requests

from tests.support.servers import REPO

pytestmark = pytest.mark.e2e

DOC = REPO / "docs" / "clients.md"
GENERATORS = REPO / "tests" / "e2e" / "generators"
NODE_MODULES = GENERATORS / "node_modules"
BIN = pathlib.Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
FILE = re.compile(r"^(?://|#) ([\w.-]+\.\w+):")
MARK = "@@@ block "
SECTIONS = {
    "openapi-typescript + openapi-fetch": "npm",
    "@hey-api/openapi-ts": "npm",
    "openapi-python-client": "pypi",
    "datamodel-code-generator + httpx": "pypi",
}


class Block(t.NamedTuple):
    lang: str
    code: str
    run: bool
    line: int


def sections() -> dict[str, list[Block]]:
    """The blocks of each ``###`` section under "## Generated clients", by title."""
    text = DOC.read_text()
    start = text.index("\n## Generated clients\n")
    end = text.find("\n## ", start + 1)
    out: dict[str, list[Block]] = {}
    title = None
    body = text[start : end if end != -1 else None]
    offset = text.count("\n", 0, start)
    for match in re.finditer(r"^### ([^\n]+)\n|^```(\w*)\n(.*?)^```\n", body, re.S | re.M):
        if match.group(1):
            title = match.group(1).strip()
            out[title] = []
            continue
        if title is None:
            continue
        before = body[: match.start()].rstrip().splitlines()
        run = not (before and before[-1].strip() == "<!-- not run -->")
        line = offset + body.count("\n", 0, match.start()) + 1
        out[title].append(Block(match.group(2), match.group(3), run, line))
    return out


def node_ready() -> None:
    if not (NODE_MODULES / ".installed").exists():
        pytest.fail(f"the generators are not installed: make {NODE_MODULES}/.installed")


def setup_cfg_pins() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    pins = {}
    for line in config["options.extras_require"]["test"].splitlines():
        match = re.match(r"([\w-]+)(?:\[[\w,]+\])?==([\w.]+)$", line.strip())
        if match:
            pins[match.group(1)] = match.group(2)
    return pins


def installed_versions(block: Block, kind: str) -> dict[str, str]:
    """The name==version (pip) or name@version (npm) pins of an install block."""
    if kind == "npm":
        found = re.findall(r"(@?[\w./-]+)@(\d[\w.]*)", block.code)
    else:
        found = re.findall(r"'?([\w-]+)(?:\[[\w,]+\])?==([\w.]+)'?", block.code)
    return dict(found)


@pytest.mark.parametrize("title", list(SECTIONS))
def test_the_install_commands_name_the_versions_tested(title):
    kind = SECTIONS[title]
    [install] = [b for b in sections()[title] if not b.run and b.lang == "sh"]
    named = installed_versions(install, kind)
    assert named, install.code
    if kind == "npm":
        package = json.loads((GENERATORS / "package.json").read_text())
        tested = {**package["devDependencies"], **package.get("dependencies", {})}
    else:
        tested = setup_cfg_pins()
    for name, version in named.items():
        assert tested.get(name) == version, f"{title}: {name}@{version}, tested {tested.get(name)}"


def run_section(title: str, server: t.Any, folder: pathlib.Path, key: str) -> str:
    """Run one section's blocks in ``folder``; the output of the blocks, checked."""
    blocks = sections()[title]
    if SECTIONS[title] == "npm":
        node_ready()
        (folder / "node_modules").symlink_to(NODE_MODULES)
        shutil.copy(GENERATORS / "package.json", folder / "package.json")
    lines = ["set -euo pipefail"]
    expected: list[tuple[int, str | None]] = []
    for i, block in enumerate(blocks):
        if not block.run:
            continue
        code = block.code.replace("http://127.0.0.1:8000", server.url)
        name = FILE.match(code)
        if block.lang in ("ts", "python", "yaml") and name:
            lines.append(f"cat > {name.group(1)} <<'MEMSVC_DOC_EOF'\n{code}MEMSVC_DOC_EOF")
            continue
        if block.lang != "sh":
            continue
        following = blocks[i + 1] if i + 1 < len(blocks) else None
        shown = following.code if following is not None and following.lang == "text" else None
        lines.append(f"echo '{MARK}{len(expected)}'")
        lines.append(code)
        expected.append((block.line, shown))
    assert expected, f"{title} has nothing to run"
    env = {
        **server.env,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "MEMSVC_API_KEY": key,
        "npm_config_offline": "true",
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
    }
    result = subprocess.run(
        ["bash", "-c", "\n".join(lines) + "\n"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = result.stdout.split(MARK)[1:]
    assert result.returncode == 0 and len(outputs) == len(expected), (
        f"{title}: the block at line {expected[max(len(outputs) - 1, 0)][0]} failed:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    for (line, shown), output in zip(expected, outputs, strict=True):
        output = output.split("\n", 1)[1] if "\n" in output else ""
        if shown is not None:
            assert output.strip() == shown.strip(), f"{title}, block at line {line}:\n{output}"
    return result.stdout + result.stderr


def operation_ids(server: t.Any) -> dict[str, str]:
    """Every procedure of the live document: its operationId, and its method."""
    doc = requests.get(server.url + "/openapi.json", timeout=30).json()
    return {
        op["operationId"]: method
        for path, methods in doc["paths"].items()
        if path.startswith("/trpc/")
        for method, op in methods.items()
    }


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize("title", list(SECTIONS))
def test_the_quick_start_generates_compiles_and_runs(server, tmp_path, title):
    key = server.create_key("gen-" + re.sub(r"\W+", "-", title), "generated")
    run_section(title, server, tmp_path, key)
    # Whatever procedures the server has, the generated client has them all:
    # a query added later is sent by the same input serializer.
    procedures = operation_ids(server)
    assert len(procedures) >= 12
    if title.startswith("openapi-typescript"):
        types = (tmp_path / "memsvc-api.d.ts").read_text()
        for op in procedures:
            assert f"    {op}: {{" in types, op
    elif title.startswith("@hey-api"):
        sdk = (tmp_path / "memsvc-hey" / "sdk.gen.ts").read_text()
        for op in procedures:
            assert f"export const {op} = " in sdk, op
    elif title == "openapi-python-client":
        api = tmp_path / "memsvc_openapi" / "api"
        modules = {p.stem for p in api.glob("*/*.py")}
        assert {snake(op) for op in procedures} <= modules
    else:
        models = (tmp_path / "memsvc_models.py").read_text()
        doc = requests.get(server.url + "/openapi.json", timeout=30).json()
        for name, schema in doc["components"]["schemas"].items():
            if schema.get("type") == "object" and "properties" in schema:
                assert f"\nclass {name}(BaseModel):" in models, name


def test_every_query_takes_its_input_as_one_json_parameter(server):
    # What the quick starts' serializers rely on, for every query there is.
    doc = requests.get(server.url + "/openapi.json", timeout=30).json()
    queries = [
        (path, op)
        for path, methods in doc["paths"].items()
        for m, op in methods.items()
        if path.startswith("/trpc/") and m == "get"
    ]
    assert len(queries) >= 6
    for path, op in queries:
        params = op.get("parameters", [])
        assert [p["name"] for p in params] in ([], ["input"]), path
        for param in params:
            assert param["in"] == "query" and list(param["content"]) == ["application/json"]


def test_openapi_python_client_generates_without_warnings(server, tmp_path):
    result = subprocess.run(
        [BIN / "openapi-python-client", "generate", "--url", server.url + "/openapi.json"]
        + ["--meta", "none", "--output-path", "out"],
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output and "Unable" not in output, output
    # The filter, the model the warnings dropped, is there and importable.
    assert (tmp_path / "out" / "models" / "filter_.py").exists()


def test_redocly_lints_the_document_without_warnings(server, tmp_path):
    node_ready()
    document = tmp_path / "openapi.json"
    document.write_text(requests.get(server.url + "/openapi.json", timeout=30).text)
    result = subprocess.run(
        [NODE_MODULES / ".bin" / "redocly", "lint", document, "--format=json"],
        cwd=tmp_path,
        env={**os.environ, "REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["totals"] == {"errors": 0, "warnings": 0, "ignored": 0}, report["problems"]


def test_a_query_sent_as_generators_send_it_names_the_fix(server):
    key = server.create_key("gen-errors", "generated")
    for query in ("userId=alice", "input%5BuserId%5D=alice", ""):
        resp = requests.get(
            f"{server.url}/trpc/memory.getAll?{query}", headers={"x-api-key": key}, timeout=30
        )
        assert resp.status_code == 400
        error = resp.json()["error"]
        assert error["code"] == "BAD_REQUEST"
        assert error["message"].endswith("send ?input=<URL-encoded JSON object>"), error
