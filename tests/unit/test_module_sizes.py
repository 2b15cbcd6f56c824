"""Modules stay small enough to read whole, and interfaces narrow enough to hold in mind.

No module of memsvc passes 600 lines, none of search/ or the console 400
(a module past that holds more than one job: split it by job, as the rest
are). No function of search/ takes seven parameters or more (what a search
is asked travels as one ``SearchRequest``). ``Store``, the part of the
store's contract every caller sees, keeps to 35 methods (the others are
parts of their own: ``Conversations``, ``VectorSource``, ``Bulk``,
``Reembedding``).
"""

from __future__ import annotations

import ast
import inspect
import pathlib

import memsvc
from memsvc.store import Store

PACKAGE = pathlib.Path(memsvc.__file__).parent

#: Most lines of a module: area -> lines; a module counts under its longest area.
MOST_LINES = {"memsvc": 600, "memsvc/search": 400, "memsvc/api/console": 400}
MOST_PARAMETERS = 6
MOST_STORE_METHODS = 35


def modules(area: str = "memsvc") -> list[pathlib.Path]:
    folder = PACKAGE.parent / area
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def lines(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def most_lines(path: pathlib.Path) -> int:
    """The bound of the deepest area ``path`` is in."""
    name = rel(path)
    areas = [a for a in MOST_LINES if name.startswith(a + "/")]
    return MOST_LINES[max(areas, key=len)]


def test_no_module_passes_its_areas_lines():
    long = {
        rel(p): f"{lines(p)} lines, at most {most_lines(p)}"
        for p in modules()
        if lines(p) > most_lines(p)
    }
    assert long == {}


def test_the_line_bounds_see_every_area():
    # A bound over an area with no modules, or one that reads no lines, cannot fail.
    for area in MOST_LINES:
        assert len(modules(area)) >= 5, area
    assert most_lines(PACKAGE / "search" / "cache.py") == 400
    assert most_lines(PACKAGE / "api" / "console" / "pages.py") == 400
    assert most_lines(PACKAGE / "api" / "trpc.py") == 600
    assert max(lines(p) for p in modules("memsvc/search")) > 200


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    """Every parameter a caller may pass: positional, keyword-only, ``*args`` and ``**kwargs``;
    not a method's ``self`` or ``cls``."""
    args = function.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def functions(source: str) -> list[tuple[str, list[str]]]:
    """(name, parameters) of every function and method in ``source``, nested ones too."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST, method: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((f"{child.name}:{child.lineno}", parameters(child, method)))
                visit(child, False)
            elif isinstance(child, ast.ClassDef):
                visit(child, True)
            else:
                visit(child, method)

    visit(ast.parse(source), False)
    return found


def test_no_search_function_takes_seven_parameters():
    wide = {
        f"{rel(p)}:{name}": names
        for p in modules("memsvc/search")
        for name, names in functions(p.read_text())
        if len(names) > MOST_PARAMETERS
    }
    assert wide == {}


def test_the_parameter_count_counts_every_kind():
    source = (
        "def f(a, /, b, *args, c, **kw): pass\n"
        "class C:\n"
        "    def m(self, a, b=1): pass\n"
        "    @classmethod\n"
        "    def k(cls, a): pass\n"
        "    def outer(self):\n"
        "        def inner(self, a): pass\n"
    )
    assert functions(source) == [
        ("f:1", ["a", "b", "c", "args", "kw"]),
        ("m:3", ["a", "b"]),
        ("k:5", ["a"]),
        ("outer:6", []),
        ("inner:7", ["self", "a"]),
    ]
    counted = [names for p in modules("memsvc/search") for _, names in functions(p.read_text())]
    assert len(counted) > 100 and max(len(n) for n in counted) >= 4  # the check can fail


def test_store_keeps_to_its_methods():
    own = [
        name
        for name, value in vars(Store).items()
        if inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod, property))
    ]
    assert set(Store.__abstractmethods__) <= set(own)  # every one declared here, none inherited
    assert 20 <= len(own) <= MOST_STORE_METHODS, sorted(own)
