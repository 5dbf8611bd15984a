"""The Grafana dashboard queries only series the code exports (or Ray built-ins listed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from promql_helpers import parse, series

from serve_app.observability.metrics import ALL_METRICS, RAY_BUILTIN_SERIES, exported_series

DASHBOARD = Path(__file__).resolve().parents[3] / "cluster" / "grafana" / "horizon-dashboard.json"

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


def test_series_are_read_from_the_syntax_tree_not_functions_labels_or_words():
    expr = ('histogram_quantile(0.95, sum by (le, model) (rate(ray_a_bucket{model=~"$model", '
            'status="2xx"}[$__rate_interval]))) / on() group_left sum(ray_b_total offset 5m) * 1e3 '
            'and max_over_time(ray_c[5m:1m])')
    assert series(expr) == {"ray_a_bucket", "ray_b_total", "ray_c"}


def test_every_query_is_promql_prometheus_accepts():
    bad = []
    for where, expr in dashboard_queries():
        try:
            parse(expr)
        except ValueError as exc:
            bad.append((where, str(exc)))
    assert not bad, bad
    with pytest.raises(ValueError, match="parenthesis"):
        parse("sum(rate(ray_horizon_requests_total[5m])")


def test_every_queried_series_is_exported_by_the_code_or_a_listed_ray_builtin():
    known = exported_series() | RAY_BUILTIN_SERIES
    queries = dashboard_queries()
    assert len(queries) >= 15
    unknown = {(where, name) for where, expr in queries for name in series(expr) if name not in known}
    assert not unknown, f"dashboard queries series the code does not export: {sorted(unknown)}"


def test_check_would_catch_a_renamed_metric():
    known = exported_series() | RAY_BUILTIN_SERIES
    assert "ray_horizon_request_total" not in known  # the plural is what the code exports
    assert "ray_horizon_requests_total" in known


def test_every_horizon_metric_is_on_the_dashboard():
    used = {name for _, expr in dashboard_queries() for name in series(expr)}
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
