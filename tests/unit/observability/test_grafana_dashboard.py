"""The Grafana dashboard queries only series the code exports (or Ray built-ins listed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from serve_app.observability.metrics import ALL_METRICS, RAY_BUILTIN_SERIES, exported_series

DASHBOARD = Path(__file__).resolve().parents[3] / "cluster" / "grafana" / "horizon-dashboard.json"

# Words that look like identifiers in PromQL but are not series names.
_PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                 "group_left", "group_right", "inf", "nan", "Inf", "NaN", "atop"}


def promql_series(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (a small, strict scanner)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # string literals
    text = re.sub(r"\{[^{}]*\}", "", text)                    # label matchers
    text = re.sub(r"\[[^\[\]]*\]", "", text)                  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)                   # Grafana variables
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        token = match.group(0)
        if text[match.end():].lstrip().startswith("("):
            continue  # function or aggregation operator
        if token in _PROMQL_WORDS:
            continue
        names.add(token)
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and templating query."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
            walk(panel.get("panels", []))

    walk(board["panels"])
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        inner = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
        queries.append((f"variable {var['name']}", inner.group(1) if inner else query))
    return queries


def test_scanner_finds_series_and_ignores_functions_labels_and_words():
    expr = ('histogram_quantile(0.95, sum by (le, model) (rate(ray_a_bucket{model=~"$model", '
            'status="2xx"}[$__rate_interval]))) / on() group_left sum(ray_b_total offset 5m) * 1e3')
    assert promql_series(expr) == {"ray_a_bucket", "ray_b_total"}


def test_every_queried_series_is_exported_by_the_code_or_a_listed_ray_builtin():
    known = exported_series() | RAY_BUILTIN_SERIES
    queries = dashboard_queries()
    assert len(queries) >= 15
    unknown = {(where, name) for where, expr in queries for name in promql_series(expr) if name not in known}
    assert not unknown, f"dashboard queries series the code does not export: {sorted(unknown)}"


def test_check_would_catch_a_renamed_metric():
    known = exported_series() | RAY_BUILTIN_SERIES
    assert "ray_horizon_request_total" not in known  # the plural is what the code exports
    assert "ray_horizon_requests_total" in known


def test_every_horizon_metric_is_on_the_dashboard():
    used = {name for _, expr in dashboard_queries() for name in promql_series(expr)}
    missing = [spec.name for spec in ALL_METRICS if not used & set(spec.exported_series())]
    assert not missing, f"metrics without a panel: {missing}"


@pytest.mark.parametrize("subject", ["latency", "success rate", "queue", "memory", "breaker", "replicas"])
def test_health_panel_covers_spec_subjects(subject):
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    titles = [p["title"].lower() for p in board["panels"] if p.get("type") != "row"]
    assert any(subject in t for t in titles), titles


def test_targets_use_the_datasource_variable():
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
