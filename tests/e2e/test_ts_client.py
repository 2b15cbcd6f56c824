"""The TypeScript package clients/ts: its types, its examples, against real gunicorn.

The examples are compiled with ``tsc --strict`` and run with node; one with a
misspelt field must not compile. The quick start also compiles, unchanged, in
a new project made as docs/clients.md says (``npm init -y``, TypeScript and
Node's types from npm, ``tsc --init``'s settings), with the package packed
from clients/ts. The package's types are generated from
GET /openapi.json, and the committed ones must be what the current server's
document gives. Everything comes from ``npm ci`` (``make test`` runs it).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import requests

from tests.support.fake_llm import FakeModel
from tests.support.fake_provider import FakeProvider
from tests.support.servers import REPO
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

PACKAGE = REPO / "clients" / "ts"
TSC = PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"
RECOMMENDED = 0.35  # service.info's recommendedThreshold for the bundled model
WIRE_DEFAULT = 0.7  # the server's default threshold


def node() -> str:
    path = shutil.which("node")
    if path is None or not TSC.exists():
        pytest.fail("needs node and clients/ts's packages: run `make test`, which installs them")
    return path


def run(*args: str | pathlib.Path, cwd: pathlib.Path = PACKAGE, **env: str) -> str:
    result = subprocess.run(
        [node(), *map(str, args)],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The package built, and its examples compiled under --strict, runnable as a user's code."""
    run(TSC, "-p", "tsconfig.json")
    out = tmp_path_factory.mktemp("ts-examples")
    run(TSC, "-p", "examples/tsconfig.json", "--strict", "--outDir", out)
    # Where a project that installed the package (and the AI SDK) would find them.
    (out / "node_modules").mkdir()
    (out / "node_modules" / "memsvc-client").symlink_to(PACKAGE, target_is_directory=True)
    for name in ("ai", "zod"):
        (out / "node_modules" / name).symlink_to(
            PACKAGE / "node_modules" / name, target_is_directory=True
        )
    return out


@pytest.fixture(scope="module")
def document(server):
    return requests.get(server.url + "/openapi.json", timeout=30).json()


def procedures(document: dict) -> set[str]:
    return {
        op["x-trpc-procedure"]
        for methods in document["paths"].values()
        for op in methods.values()
        if "x-trpc-procedure" in op
    }


def test_the_examples_compile_under_strict(examples):
    assert (examples / "every-procedure.js").is_file()
    assert (examples / "quickstart.js").is_file()
    assert (examples / "search-defaults.js").is_file()
    assert (examples / "ai-tools.js").is_file()
    assert (examples / "jobs.js").is_file()


def test_a_misspelt_field_does_not_compile():
    result = subprocess.run(
        [node(), str(TSC), "--noEmit", "--strict", "--module", "nodenext"]
        + ["--moduleResolution", "nodenext", "--target", "es2022", "--types", "node"]
        + ["examples/must-not-compile/misspelt.ts"],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "'contnet' does not exist in type 'AddMemoryInput'" in result.stdout, result.stdout


@pytest.mark.parametrize("batch", ["0", "1"], ids=["httpLink", "httpBatchLink"])
def test_every_procedure_through_the_typed_client(server, examples, document, batch):
    before = server.output().count("\n")
    out = json.loads(
        run(
            "every-procedure.js",
            cwd=examples,
            MEMSVC_URL=server.url,
            MEMSVC_API_KEY=server.create_key("tenant-A", f"ts-{batch}"),
            MEMSVC_TOKEN=server.token("tenant-A"),
            MEMSVC_BATCH=batch,
        )
    )
    assert set(out["called"]) == procedures(document), "the example must call every procedure"
    added = out["added"]
    assert added["content"] == "Bob is training for the Berlin marathon"
    assert added["metadata"] == {"topic": "sport", "level": 3} and "expiresAt" in added
    assert out["dedupedTo"] == added["id"]
    assert out["best"]["id"] == added["id"] and 0 < out["best"]["similarity"] <= 1
    assert out["byId"] == added
    assert out["users"] == [[True, 2]]
    assert out["pages"][1] == [added["id"]] and out["pages"][0] != out["pages"][1]
    updated = out["updated"]
    assert updated["content"] == "Bob ran the Berlin marathon" and updated["metadata"] == {}
    assert "expiresAt" not in updated and updated["createdAt"] == added["createdAt"]
    assert out["history"] == [[1, "add"], [2, "update"]]
    assert out["info"] == {"model": "local:all-MiniLM-L6-v2", "dimensions": 384, "limit": 10}
    assert out["deleted"] == {"success": True} and out["revoked"] == {"success": True}
    assert out["ingested"] == {
        "sessionId": "berlin",
        "positions": [[0, "user", "Bob", "message"], [1, "assistant", None, "message"]],
        "duplicatesAgain": 2,
    }
    assert out["sessions"] == [["berlin", 2]]
    assert out["conversation"] == ["m1", "m2"]
    assert out["jobs"] == {"listed": 0, "ingestJob": None, "notFound": ["NOT_FOUND"] * 2}
    assert out["deletedAll"] == {"success": True, "deleted": 3}
    assert out["limits"] == [30, None]
    assert out["key"] == {"name": "every procedure", "secretPrefix": "sk_memsvc_", "listed": True}
    assert out["notFound"] == {
        "code": "NOT_FOUND",
        "httpStatus": 404,
        "path": "memory.getById",
        "message": "Memory not found",
    }
    assert out["badRequest"]["code"] == "BAD_REQUEST" and out["badRequest"]["httpStatus"] == 400
    assert "limit" in out["badRequest"]["message"]
    # The access log shows the path of each request: batches join procedures with commas.
    requests_made = server.output().splitlines()[before:]
    batched = [line for line in requests_made if re.search(r"/trpc/[^ ]*,", line)]
    assert bool(batched) == (batch == "1"), requests_made


def test_the_quickstart_prints_what_the_docs_say(server, examples):
    out = run(
        "quickstart.js",
        cwd=examples,
        MEMSVC_URL=server.url,
        MEMSVC_API_KEY=server.create_key("tenant-Q", "quickstart"),
    )
    match = re.fullmatch(r"\[ 'Carol likes jazz \((0\.\d\d)\)' \]\nNOT_FOUND 404\n", out)
    assert match, out
    # Found with no threshold given, though under the server's default (0.7).
    assert RECOMMENDED <= float(match.group(1)) < WIRE_DEFAULT


def searches(out: dict) -> list[dict]:
    """The inputs of the memory.search calls sent, without the user id."""
    return [
        {k: v for k, v in call["input"].items() if k != "userId"}
        for call in out["sent"]
        if call["path"] == "memory.search"
    ]


@pytest.mark.parametrize("batch", ["0", "1"], ids=["httpLink", "httpBatchLink"])
def test_searches_default_to_hybrid_and_the_recommended_threshold(server, examples, batch):
    out = json.loads(
        run(
            "search-defaults.js",
            cwd=examples,
            MEMSVC_URL=server.url,
            MEMSVC_API_KEY=server.create_key("tenant-S", f"defaults-{batch}"),
            MEMSVC_BATCH=batch,
        )
    )
    bees, budget = out["ids"]["bees"], out["ids"]["budget"]
    pets = "Does Dan have any pets?"
    # A natural question, no threshold: found, though under the server's default.
    (natural,) = out["natural"]
    assert natural["id"] == bees and RECOMMENDED <= natural["similarity"] < WIRE_DEFAULT
    assert natural["matchedBy"] == ["keyword", "semantic"]  # hybrid
    assert out["strict"] == []  # 0.7, given, is sent as given
    # Keyword mode, no threshold: no floor, whatever the cosine.
    (keyword,) = out["keyword"]
    assert keyword["id"] == budget and keyword["similarity"] < RECOMMENDED
    assert out["hybrid"] == []  # hybrid keeps the recommended floor
    explained = out["explained"]
    assert explained["explain"]["cosine"] == explained["similarity"]
    assert 0 < explained["explain"]["keyword"] <= 1
    assert explained["explain"]["score"] > explained["similarity"]
    assert "matchedBy" not in out["semantic"][0] and "matchedBy" not in out["otherDefault"][0]
    assert searches(out) == [
        {"query": pets, "threshold": WIRE_DEFAULT, "mode": "hybrid"},
        {"query": "zebra", "mode": "keyword"},
        {"query": pets, "mode": "hybrid", "threshold": RECOMMENDED},
        {"query": "zebra", "mode": "hybrid", "threshold": RECOMMENDED},
        {"query": pets, "explain": True, "mode": "hybrid", "threshold": RECOMMENDED},
        {"query": pets, "mode": "semantic", "threshold": RECOMMENDED},
        {"query": pets, "mode": "semantic", "threshold": RECOMMENDED},  # defaultMode
    ]
    # service.info once per client, before the first search that needed it.
    paths = [call["path"] for call in out["sent"]]
    assert paths.count("service.info") == 2
    assert paths[0] == "service.info" and paths[-2] == "service.info"


def test_a_server_recommending_no_threshold_gets_none(examples, tmp_path):
    # A model memsvc has not measured: service.info's recommendedThreshold is
    # null, so searches go without one and the server's default applies.
    with FakeProvider(delay=0) as provider:
        server = start_server(tmp_path, **provider.settings)
        try:
            out = json.loads(
                run(
                    "search-defaults.js",
                    cwd=examples,
                    MEMSVC_URL=server.url,
                    MEMSVC_API_KEY=server.create_key("tenant-U", "unmeasured"),
                )
            )
        finally:
            server.stop()
    sent = searches(out)
    assert [call.get("threshold") for call in sent] == [WIRE_DEFAULT] + [None] * 6
    assert [call["mode"] for call in sent] == ["hybrid", "keyword"] + ["hybrid"] * 3 + [
        "semantic"
    ] * 2


def test_refused_calls_are_retried_after_retry_after_and_every_write_lands(server, examples):
    secret = server.create_key("tenant-R", "one-at-a-time")
    token = {"Authorization": f"Bearer {server.token('tenant-R')}"}
    keys = requests.get(f"{server.trpc}/keys.list", headers=token, timeout=30).json()
    (key_id,) = [k["id"] for k in keys["result"]["data"] if k["name"] == "one-at-a-time"]
    server.cli("keys", "set-limits", key_id, "--concurrent", "1")
    before = server.output().count('"POST /trpc/memory.add HTTP/1.1" 429')
    out = json.loads(run("retries.js", cwd=examples, MEMSVC_URL=server.url, MEMSVC_API_KEY=secret))
    assert out == {"added": 10, "stored": 10}
    refused = server.output().count('"POST /trpc/memory.add HTTP/1.1" 429') - before
    assert refused > 0  # the limit was met, and waited out


def test_extraction_jobs_are_waited_for_listed_and_retried(examples, tmp_path):
    # The fake model takes a second an answer, so a job is seen unsettled; one
    # model call a job, so its broken answer fails the job at once.
    with FakeModel() as model:
        model.delay_ms = 1000
        server = start_server(
            tmp_path,
            MEMSVC_LLM_URL=model.url,
            MEMSVC_LLM_MODEL="fake",
            MEMSVC_EXTRACT_MAX_ATTEMPTS="1",
        )
        try:
            out = json.loads(
                run(
                    "jobs.js",
                    cwd=examples,
                    MEMSVC_URL=server.url,
                    MEMSVC_API_KEY=server.create_key("tenant-J", "jobs"),
                )
            )
        finally:
            server.stop()
    assert out["queued"] == {"status": "queued", "attempts": 0}
    done = out["done"]
    assert done["status"] == "done" and done["attempts"] == 1 and done["usage"]
    ((fact_id, content, sources),) = out["facts"]
    assert done["added"] == [fact_id] and content == "The user said: I live in Porto"
    porto = [m for m, text in out["messages"] if text == "I live in Porto"]
    assert sources == porto
    assert out["timedOut"]["name"] == "JobTimeoutError" and out["timedOut"]["timeout"] == 0.2
    assert out["timedOut"]["status"] in ("queued", "running")
    assert out["slowDone"] == "done"
    assert out["failed"] == {"status": "failed", "attempts": 1, "error": True}
    assert out["retried"] == {"id": True, "status": "queued", "attempts": 0}
    assert out["failedAgain"] == {"status": "failed", "attempts": 1}
    ids = out["ids"]
    assert out["pages"] == [[ids["broken"], ids["slow"]], [ids["queued"]]]
    assert out["failedOnly"] == [ids["broken"]]
    assert out["notFound"] == {"code": "NOT_FOUND", "httpStatus": 404, "path": "memory.job"}
    # Four model calls: three jobs, one of them twice.
    assert len(model.requests) == 4


def doc_block(text: str, lang: str, containing: str) -> str:
    """The one ``lang`` block of a document that contains ``containing``."""
    (block,) = [
        code
        for kind, code in re.findall(r"```(\w*)\n(.*?)```", text, re.S)
        if kind == lang and containing in code
    ]
    return block


# Packages from npm's cache where it has them, else from the registry.
NPM_ENV = {
    "npm_config_prefer_offline": "true",
    "npm_config_audit": "false",
    "npm_config_fund": "false",
    "npm_config_update_notifier": "false",
}


@pytest.fixture(scope="module")
def new_project(tmp_path_factory):
    """A project made as docs/clients.md says, the package packed from clients/ts."""
    if shutil.which("npm") is None or shutil.which("npx") is None:
        pytest.fail("needs node and npm: run `make test`, which installs the rest")
    packed = tmp_path_factory.mktemp("ts-package")
    result = subprocess.run(
        ["npm", "pack", "--pack-destination", str(packed)],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (tarball,) = packed.glob("memsvc-client-*.tgz")
    setup = doc_block((REPO / "docs" / "clients.md").read_text(), "sh", "npx tsc --init")
    placeholder = "./path/to/memsvc-client-0.2.0.tgz"
    assert placeholder in setup and "npm init -y" in setup
    project = tmp_path_factory.mktemp("ts-project") / "memsvc-quickstart"
    project.mkdir()
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup.replace(placeholder, str(tarball))],
        cwd=project,
        env={**os.environ, **NPM_ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return project


def test_a_new_project_gets_tsc_inits_strict_settings(new_project):
    package = json.loads((new_project / "package.json").read_text())
    assert package["type"] == "module"
    assert set(package["devDependencies"]) == {"typescript", "@types/node"}
    assert list(package["dependencies"]) == ["memsvc-client"]
    config = (new_project / "tsconfig.json").read_text()
    for setting in ['"strict": true', '"exactOptionalPropertyTypes": true', '"types": ["node"]']:
        assert setting in config, config


def test_the_quickstart_compiles_unchanged_in_a_new_project_and_runs(server, new_project):
    (new_project / "quickstart.ts").write_text((PACKAGE / "examples" / "quickstart.ts").read_text())
    readme = doc_block((PACKAGE / "README.md").read_text(), "ts", "createMemsvcClient")
    (new_project / "readme.ts").write_text(readme.replace("http://127.0.0.1:8000", server.url))
    docs = (REPO / "docs" / "clients.md").read_text()
    command = doc_block(docs, "sh", "node quickstart.js").strip()
    assert command == "npx tsc && MEMSVC_API_KEY=$KEY node quickstart.js"
    env = {
        **os.environ,
        **NPM_ENV,
        "KEY": server.create_key("tenant-N", "new project"),
        "MEMSVC_URL": server.url,
    }
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=new_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.fullmatch(r"\[ 'Carol likes jazz \((0\.\d\d)\)' \]\nNOT_FOUND 404\n", result.stdout)
    assert match, result.stdout + result.stderr
    assert RECOMMENDED <= float(match.group(1)) < WIRE_DEFAULT
    env["MEMSVC_API_KEY"] = env["KEY"]
    out = subprocess.run(
        ["node", "readme.js"],
        cwd=new_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.stdout == "[ 'Carol likes jazz' ]\n", out.stdout + out.stderr


def test_the_docs_show_the_quickstart_as_compiled():
    docs = (REPO / "docs" / "clients.md").read_text()
    example = (PACKAGE / "examples" / "quickstart.ts").read_text()
    assert f"```ts\n{example}```" in docs


def test_the_readme_example_runs_as_written(server, examples):
    readme = (PACKAGE / "README.md").read_text()
    (code,) = re.findall(r"```ts\n(.*?)```", readme, re.S)
    # Next to the compiled examples, where "memsvc-client" is the package.
    (examples / "readme.mts").write_text(code.replace("http://127.0.0.1:8000", server.url))
    flags = ["--strict", "--module", "nodenext", "--moduleResolution", "nodenext"]
    flags += ["--target", "es2022", "--skipLibCheck", "--types", "node"]
    flags += ["--typeRoots", str(PACKAGE / "node_modules" / "@types")]
    run(TSC, *flags, "readme.mts", cwd=examples)  # .mts: an ES module
    out = run("readme.mjs", cwd=examples, MEMSVC_API_KEY=server.create_key("tenant-M", "readme"))
    # The question scores about 0.6 with the memory: found with no threshold given.
    assert out == "[ 'Carol likes jazz' ]\n"


def test_the_committed_types_are_what_the_servers_document_gives(document, tmp_path):
    saved = tmp_path / "openapi.json"
    saved.write_text(json.dumps(document))
    run("scripts/generate.mjs", saved, tmp_path / "generated.ts")
    generated = (tmp_path / "generated.ts").read_text()
    committed = (PACKAGE / "src" / "generated.ts").read_text()
    assert generated == committed, (
        "clients/ts/src/generated.ts is stale: with `make run` serving, run "
        "`cd clients/ts && npm run generate -- http://127.0.0.1:8000/openapi.json`"
    )


def test_a_change_in_the_document_changes_the_types(document, tmp_path):
    # The check above can fail: a new input field appears in the generated types.
    changed = json.loads(json.dumps(document))
    search = changed["components"]["schemas"]["SearchInput"]["properties"]
    search["mode"] = {"type": "string", "enum": ["semantic", "keyword", "hybrid"]}
    saved = tmp_path / "openapi.json"
    saved.write_text(json.dumps(changed))
    run("scripts/generate.mjs", saved, tmp_path / "generated.ts")
    generated = (tmp_path / "generated.ts").read_text()
    assert 'mode?: "semantic" | "keyword" | "hybrid" | undefined;' in generated
    assert generated != (PACKAGE / "src" / "generated.ts").read_text()


# -- memsvc-client/ai: the Vercel AI SDK's tools ------------------------------------


def test_the_ai_sdk_runs_the_tools_for_their_user_only(server, examples):
    user = "ai-user"
    out = json.loads(
        run(
            "ai-tools.js",
            cwd=examples,
            MEMSVC_URL=server.url,
            MEMSVC_API_KEY=server.create_key("tenant-AI", "ai"),
            MEMSVC_OTHER_KEY=server.create_key("tenant-AI-other", "ai"),
            MEMSVC_USER=user,
        )
    )
    # generateText ran each tool the (mock) model called, with the model's input.
    ((added,),) = [out["added"]["results"]]
    assert added["content"] == "Dan keeps bees in his garden"
    assert added["metadata"] == {"source": "agent"} and out["added"]["text"] == "done"
    assert out["again"]["results"] == [added]  # stored once
    ((found,),) = out["searched"]["results"]
    assert found["id"] == added["id"] and RECOMMENDED <= found["similarity"] < WIRE_DEFAULT
    # The zod schema refused an empty query before anything was sent.
    assert out["invalid"]["results"] == [] and len(out["invalid"]["errors"]) == 1
    assert "query" in out["invalid"]["errors"][0]
    # Called directly, as the application may; other users' and tenants' memories never.
    assert out["direct"] == [found]
    assert [m["id"] for m in out["all"]] == [added["id"]]
    assert out["none"] == []
    assert out["stored"] == [
        {"id": added["id"], "content": added["content"], "metadata": {"source": "agent"}}
    ]
    assert out["schemas"]["searchMemories"] == ["description", "execute", "inputSchema"]
    assert out["schemas"]["description"].startswith("Search what you remember about the user")


def test_the_docs_show_the_ai_quickstart_as_compiled():
    docs = (REPO / "docs" / "clients.md").read_text()
    example = (PACKAGE / "examples" / "ai-quickstart.ts").read_text()
    assert f"```ts\n{example}```" in docs


@pytest.fixture(scope="module")
def ai_project(tmp_path_factory, new_project):
    """A new project made as docs/clients.md says, with the AI SDK added as it says."""
    project = tmp_path_factory.mktemp("ts-ai-project") / "memsvc-ai"
    shutil.copytree(new_project, project, symlinks=True)
    setup = doc_block((REPO / "docs" / "clients.md").read_text(), "sh", "npm install ai@")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup],
        cwd=project,
        env={**os.environ, **NPM_ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return project


def test_the_ai_quickstart_compiles_unchanged_in_a_new_project_and_runs(server, ai_project):
    package = json.loads((ai_project / "package.json").read_text())
    assert sorted(package["dependencies"]) == ["ai", "memsvc-client", "zod"]
    (ai_project / "ai-quickstart.ts").write_text(
        (PACKAGE / "examples" / "ai-quickstart.ts").read_text()
    )
    docs = (REPO / "docs" / "clients.md").read_text()
    command = doc_block(docs, "sh", "node ai-quickstart.js").strip()
    assert command == "npx tsc && MEMSVC_API_KEY=$KEY node ai-quickstart.js"
    env = {
        **os.environ,
        **NPM_ENV,
        "KEY": server.create_key("tenant-N-ai", "new project"),
        "MEMSVC_URL": server.url,
    }
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=ai_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.fullmatch(
        r"\[ 'Erin is vegetarian and loves Thai food \((0\.\d\d)\)' \]\n", result.stdout
    )
    assert match, result.stdout + result.stderr
    shown = re.search(r"Thai food \((0\.\d\d)\)", docs.split("node ai-quickstart.js", 1)[1])
    assert shown and abs(float(shown.group(1)) - float(match.group(1))) < 0.02


def test_the_package_root_loads_without_the_ai_sdk(new_project):
    # memsvc-client itself never imports ai or zod: a project without them runs it.
    assert not (new_project / "node_modules" / "ai").exists()
    result = subprocess.run(
        [
            node(),
            "-e",
            "import('memsvc-client').then((m) => console.log(typeof m.createMemsvcClient))",
        ],
        cwd=new_project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout == "function\n", result.stdout + result.stderr
