"""docs/performance.md quotes the recorded benchmark results as they are (make docs)."""

import pathlib

from bench import report

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "performance.md"


def test_the_performance_page_quotes_the_recorded_results_as_they_are():
    page = DOCS.read_text()
    assert report.quoted(page) == page, "run `make docs` after recording benchmark results"


def test_every_recorded_result_is_quoted_and_carries_its_date_commit_and_command():
    page = DOCS.read_text()
    for result in sorted(report.RESULTS.glob("*.txt")):
        assert f"bench/results/{result.name} (make docs)" in page, result.name
        header = result.read_text().splitlines()[:3]
        assert header[0].startswith(f"# {result.stem}: ") and " UTC, commit " in header[0]
        assert header[2].startswith("# python -m bench.")


def test_quoting_replaces_only_what_is_between_the_markers(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    (tmp_path / "x.txt").write_text("# x: new\n")
    page = (
        "a\n<!-- results: bench/results/x.txt (make docs) -->\n```\nold\n```\n"
        "<!-- end of results -->\nb\n"
    )
    assert report.quoted(page) == (
        "a\n<!-- results: bench/results/x.txt (make docs) -->\n```\n# x: new\n```\n"
        "<!-- end of results -->\nb\n"
    )
