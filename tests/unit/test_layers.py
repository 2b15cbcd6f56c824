"""The package layout is the architecture: these tests keep its boundaries from eroding.

Dependencies point inward: api -> services -> search -> store. Only the app
factory and the api package know about Flask; nothing below the api
package imports it, or anything above itself. And no memsvc modules import
each other, directly or round a longer loop: every import counts, at the
top of a module or inside a function (a deferred import is still a
dependency), and so do those under ``if t.TYPE_CHECKING:``, which never run
but still tie the two modules together (what one names belongs beside
what names it).
"""

from __future__ import annotations

import ast
import collections
import pathlib
import typing as t

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
    "memsvc/limits": {"api", "services", "search", "store", "serving", "cli", "runtime"},
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


def module_name(path: pathlib.Path) -> str:
    parts = rel(path).removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: pathlib.Path, *, type_checking: bool = False) -> set[str]:
    """The memsvc modules ``path`` imports when it runs, anywhere but under TYPE_CHECKING
    (there too with ``type_checking``).

    A name imported from a module (``from .x import y``) counts as that
    module; ``from . import x`` as the submodule ``x`` if there is one.
    """
    known = {module_name(p) for p in modules()}
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child) and not type_checking:
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                found.update(f"{module}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    resolved = set()
    for name in found:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != here:
            resolved.add(name)
    return resolved


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    return {module_name(p): runtime_imports(p, type_checking=type_checking) for p in modules()}


class Cycle(t.NamedTuple):
    #: One loop through the group: from its first module back to it, the shortest way.
    loop: list[str]
    #: Every module of the group: each reaches every other one through imports.
    modules: list[str]

    def __str__(self) -> str:
        return " -> ".join(self.loop) + f"  (the group: {', '.join(self.modules)})"


def import_cycles(graph: dict[str, set[str]]) -> list[Cycle]:
    """Every import cycle: each group of modules that reach each other (a strongly
    connected component of the graph), with one loop through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for group in groups:
        start = min(group)
        came: dict[str, str] = {}
        queue = collections.deque([start])
        while queue:
            v = queue.popleft()
            if start in graph[v]:
                loop = [start]
                while v != start:
                    loop.insert(1, v)
                    v = came[v]
                cycles.append(Cycle(loop + [start], sorted(group)))
                break
            for w in sorted(graph[v] & group):
                if w not in came and w != start:
                    came[w] = v
                    queue.append(w)
    return sorted(cycles)


#: Import cycles known and being broken elsewhere: a cycle whose modules are all
#: inside one of these areas (area -> why) is expected. Each entry is to go when its
#: cycle does: an entry that matches no cycle fails the test too, so the list
#: cannot go stale. Empty: the last one (the embedding models' modules) is gone.
KNOWN_CYCLES: dict[str, str] = {}


def within(cycle: Cycle, area: str) -> bool:
    return all(m == area or m.startswith(area + ".") for m in cycle.modules)


@pytest.mark.parametrize("type_checking", [False, True], ids=["at run time", "type-only too"])
def test_no_import_cycles(type_checking):
    cycles = import_cycles(import_graph(type_checking=type_checking))
    unexpected = [c for c in cycles if not any(within(c, area) for area in KNOWN_CYCLES)]
    stale = [area for area in KNOWN_CYCLES if not any(within(c, area) for c in cycles)]
    assert not unexpected, "import cycles:\n" + "\n".join(str(c) for c in unexpected)
    assert not stale, f"no import cycle in {stale} any more: remove it from KNOWN_CYCLES"


def test_the_cycle_check_finds_cycles_and_skips_type_checking_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert import_cycles(graph) == [
        Cycle(["a", "b", "c", "a"], ["a", "b", "c"]),
        Cycle(["e", "f", "e"], ["e", "f"]),
    ]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    # Deferred imports count: the app factory imports the api inside create_app.
    assert "memsvc.api" in graph["memsvc"]
    assert "memsvc.housekeeping" in graph["memsvc.runtime"]
    # Imports for type checking only count only when asked for (procedures names
    # the runtime's type so).
    assert "memsvc.runtime" in imported(PACKAGE / "api" / "procedures.py")
    assert "memsvc.runtime" not in graph["memsvc.api.procedures"]
    assert "memsvc.runtime" in import_graph(type_checking=True)["memsvc.api.procedures"]


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
    assert "memsvc.store" in imported(PACKAGE / "search" / "semantic.py")
    assert "memsvc.search.exact" in imported(PACKAGE / "search" / "scanning.py")
    assert "memsvc.api.procedures" in imported(PACKAGE / "api" / "memory.py")
