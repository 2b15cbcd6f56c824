"""docs/development.md and the README's code map name only what exists, and the code map
names every package and top-level module of memsvc."""

from __future__ import annotations

import importlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "development.md"


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def test_every_file_and_folder_the_development_doc_names_exists():
    paths = [s for s in code_spans(DOC.read_text()) if re.fullmatch(r"[\w./-]+/[\w./-]*", s)]
    assert len(paths) >= 20  # the test can fail
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == []


def test_every_hook_the_development_doc_names_exists():
    text = DOC.read_text()
    from memsvc.api import ROUTERS
    from memsvc.api.procedures import Router

    assert "`ROUTERS`" in text and ROUTERS
    for name in re.findall(r"`Router\.(\w+)`", text):
        assert callable(getattr(Router, name)), name
    for name in re.findall(r"`@router\.(\w+)\(", text):
        assert callable(getattr(Router, name)), name
    assert importlib.import_module("memsvc.store.schema").SCHEMA_VERSION
    assert importlib.import_module("memsvc.api.outputs").Output
    assert callable(importlib.import_module("memsvc.api.procedure_table").write_docs)
    from memsvc import store
    from memsvc.store import sql

    assert "`Store`" in text and store.Store
    parts = {"Store", "Conversations", "VectorSource", "Bulk", "Reembedding"}
    for part in parts:
        assert f"`{part}`" in text and issubclass(store.FullStore, getattr(store, part)), part
    named = re.findall(r"`(\w+)\.(\w+)`", text)
    assert len([n for n in named if n[0] in parts]) >= 20  # the check can fail
    for owner, name in named:
        if owner in parts:
            assert callable(getattr(getattr(store, owner), name)), (owner, name)
        elif owner.startswith("Sql"):
            assert callable(getattr(getattr(sql, owner), name)), (owner, name)
    makefile = (ROOT / "Makefile").read_text()
    assert "procedure_table.write_docs" in makefile and "\ndocs:" in makefile
    package = (ROOT / "clients" / "ts" / "package.json").read_text()
    assert '"generate": "node scripts/generate.mjs"' in package


def test_the_code_map_names_every_package_and_module_of_memsvc_once():
    readme = (ROOT / "README.md").read_text()
    lines = [line for line in readme.splitlines() if line.startswith("- `memsvc/")]
    named = [re.match(r"- `memsvc/([\w.]+)/?`", line).group(1) for line in lines]
    package = ROOT / "memsvc"
    there = sorted(
        p.name
        for p in package.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py")
        or (p.is_dir() and (p / "__init__.py").exists())
    )
    assert sorted(named) == there
