"""The Grafana dashboard and the alert rules of docs/operations.md ask for metrics memsvc has."""

from __future__ import annotations

import json
import re

import pytest

from memsvc.observability import metrics
from tests.support.servers import REPO

NAME = re.compile(r"\bmemsvc_[a-z_]+\b")


def exported() -> set[str]:
    """Every sample name memsvc's metrics can carry (a histogram's _bucket, _count, _sum)."""
    metrics.setup(())
    assert metrics._metrics is not None
    names = set()
    for family in metrics._metrics.registry.collect():
        if family.type == "counter":
            names |= {family.name + "_total"}
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
        else:
            names.add(family.name)
    return names


def dashboard_queries() -> list[str]:
    dash = json.loads((REPO / "docs" / "grafana" / "memsvc.json").read_text())
    return [target["expr"] for panel in dash["panels"] for target in panel["targets"]]


def alert_queries() -> list[str]:
    doc = (REPO / "docs" / "operations.md").read_text()
    rules = doc[doc.index("### Alert rules") :]
    block = re.search(r"```yaml\n(.*?)```", rules, re.S).group(1)
    return re.findall(r"expr: (?:\|\n)?((?:.+\n)+?)(?=\s+(?:for|annotations):)", block)


@pytest.mark.parametrize("source", [dashboard_queries, alert_queries])
def test_every_query_names_metrics_memsvc_exports(source):
    queries = source()
    assert queries
    known = exported()
    for query in queries:
        names = NAME.findall(query)
        assert names, f"names no memsvc metric: {query}"
        unknown = set(names) - known
        assert not unknown, f"{query}: {sorted(unknown)} are not memsvc metrics"


def test_the_alert_rules_cover_what_operators_page_on():
    rules = " ".join(alert_queries())
    assert 'code=~"INTERNAL_SERVER_ERROR|SERVICE_UNAVAILABLE"' in rules
    assert 'code="TOO_MANY_REQUESTS"' in rules
    assert "memsvc_storage_failures_total" in rules
    assert "memsvc_embedding_failures_total" in rules


def test_the_metrics_table_lists_every_metric():
    doc = (REPO / "docs" / "operations.md").read_text()
    table = doc[doc.index("| Metric |") : doc.index("### Alert rules")]
    documented = set(NAME.findall(table))
    families = {
        re.sub(r"_(total|bucket|count|sum)$", "", n) if not n.endswith("_total") else n
        for n in exported()
    }
    base = {n for n in families if not n.endswith(("_bucket", "_count", "_sum"))}
    assert base - documented == set()
