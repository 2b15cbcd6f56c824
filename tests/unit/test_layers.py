"""The package layout is the architecture: these tests keep its boundaries from eroding.

Dependencies point inward: api -> services -> search -> store. Only the app
factory and the api package know about Flask; nothing below the api
package imports it, or anything above itself.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import memsvc

PACKAGE = pathlib.Path(memsvc.__file__).parent

#: May import Flask or Werkzeug.
WEB = {"memsvc/__init__.py", "memsvc/api"}

#: module area -> memsvc areas it must never import.
FORBIDDEN = {
    "memsvc/store": {"api", "services", "search", "serving", "cli", "runtime", "embeddings"},
    "memsvc/search": {"api", "services", "serving", "cli", "runtime"},
    "memsvc/embeddings": {"api", "services", "search", "store", "serving", "cli", "runtime"},
    "memsvc/services": {"api", "serving", "cli", "runtime"},
    "memsvc/api": {"serving", "cli"},
    "memsvc/limits.py": {"api", "services", "search", "store", "serving", "cli", "runtime"},
    "memsvc/tokens.py": {"api", "services", "search", "store", "serving", "cli", "runtime"},
    "memsvc/rules.py": {"api", "services", "search", "store", "serving", "cli", "runtime"},
    "memsvc/wire.py": {"api", "services", "search", "store", "serving", "cli", "runtime"},
}


def modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def imported(path: pathlib.Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text())
    here = rel(path).removesuffix(".py").split("/")
    if here[-1] == "__init__":
        here = here[:-1]
    else:
        here = here[:-1]  # the package the module is in
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    names.update(f"{module}.{alias.name}" for alias in node.names)
                else:
                    names.add(module)
            else:
                names.add(node.module or "")
    return names


def in_area(path: str, area: str) -> bool:
    return path == area or path.startswith(area + "/")


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_only_the_app_factory_and_the_api_package_import_flask(path):
    if any(in_area(rel(path), area) for area in WEB):
        return
    web = {n for n in imported(path) if n.split(".")[0] in ("flask", "werkzeug")}
    assert not web, f"{rel(path)} imports {sorted(web)}; only {sorted(WEB)} may"


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_dependencies_point_inward(path):
    for area, forbidden in FORBIDDEN.items():
        if not in_area(rel(path), area):
            continue
        reached = {
            n for n in imported(path) if n.startswith("memsvc.") and n.split(".")[1] in forbidden
        }
        assert not reached, f"{rel(path)} imports {sorted(reached)}"


def test_the_checks_see_real_imports():
    # A check that finds nothing to check cannot fail.
    assert "flask" in imported(PACKAGE / "api" / "trpc.py")
    assert "memsvc.store" in imported(PACKAGE / "search" / "__init__.py")
    assert "memsvc.search.exact" in imported(PACKAGE / "search" / "__init__.py")
    assert "memsvc.api.trpc" in imported(PACKAGE / "api" / "memory.py")
