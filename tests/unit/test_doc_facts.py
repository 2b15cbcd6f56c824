"""What the documentation says of the repository holds.

Its links reach what they name (a file of the repository, a heading in
it), and the README's prerequisites name every tool ``make test`` runs.
"""

from __future__ import annotations

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
