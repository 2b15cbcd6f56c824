"""What the documentation says of the repository holds.

Its links reach what they name (a file of the repository, a heading in
it), the README's prerequisites name every tool ``make test`` runs, and
memsvc's docstrings and comments name modules that exist.
"""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
DOCS += ["clients/ts/README.md", "clients/python/README.md", "CHANGES.md"]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a document's headings: lower case, punctuation dropped."""
    out: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in out:
            n += 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(text: str) -> list[str]:
    return LINK.findall(FENCE.sub("", text))


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_reaches_a_file_and_heading_of_the_repository(doc):
    path = REPO / doc
    broken = []
    for target in links(path.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # https://, mailto: the web's, not the repository's
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists() or REPO not in [linked, *linked.parents]:
            broken.append(target)
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked.read_text())):
            broken.append(target)
    assert not broken, f"{doc}: links to nothing: {broken}"


def test_the_check_finds_a_missing_heading(tmp_path):
    assert "filters" in anchors((REPO / "docs" / "api.md").read_text())
    assert "serviceinfo" in anchors((REPO / "docs" / "api.md").read_text())
    assert "api-extensions" not in anchors((REPO / "docs" / "api.md").read_text())


def test_the_readmes_prerequisites_name_every_tool_make_test_runs():
    makefile = (REPO / "Makefile").read_text()
    readme = (REPO / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start") : readme.index("## Walk-through")]
    recipes = "\n".join(line for line in makefile.splitlines() if line.startswith("\t"))
    needed = ["Python 3.11", "make"]
    if "npm ci" in recipes:  # make test installs the Node packages its tests drive
        needed += ["Node.js", "npm"]
    missing = [tool for tool in needed if tool not in quick_start]
    assert not missing, f"the README's quick start does not name {missing}"


def _resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` is a module, or a name reachable from the longest module it starts with."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


#: Extensions of file names such as memsvc.sqlite3, which are no modules.
FILES = {"sqlite3", "jsonl", "json", "lock", "log", "py", "md"}


def test_memsvcs_own_docstrings_and_comments_name_modules_that_exist():
    # "memsvc.trpc" once named what is now memsvc.api.trpc; a role such as
    # :mod:`.schema` is read from its module's package.
    absolute = re.compile(r"(?<![\w./])(memsvc(?:\.[A-Za-z_]\w*)+)")
    relative = re.compile(r":(?:mod|func|class|meth|data):`~?(\.+[\w.]+)`")
    stale = []
    for path in sorted((REPO / "memsvc").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        package = module.removesuffix(".__init__")
        package = package if path.name == "__init__.py" else package.rpartition(".")[0]
        for n, line in enumerate(path.read_text().splitlines(), 1):
            names = [m for m in absolute.findall(line) if m.rpartition(".")[2] not in FILES]
            for ref in relative.findall(line):
                dots = len(ref) - len(ref.lstrip("."))
                base = package.split(".")[: len(package.split(".")) - (dots - 1)]
                names.append(".".join(base) + "." + ref.lstrip("."))
            where = f"{path.relative_to(REPO)}:{n}"
            stale += [f"{where}: {name}" for name in names if not _resolves(name)]
    assert not stale, "\n".join(stale)
