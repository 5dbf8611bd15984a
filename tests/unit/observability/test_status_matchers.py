"""The dashboard's and the alert rules' status matchers select values the code records: a
model call is "ok" or the HTTP status of its failure, a client request its HTTP status. The
dashboard's success-rate panel matched model calls on ``status=~"2.."``, which no model call
ever had, so it showed 0 % for every healthy model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from promql_helpers import accepts, selectors
from test_grafana_dashboard import dashboard_queries

from serve_app.observability.metrics import MODEL_CALLS, REQUESTS, record_model_call, record_request

RULES = Path(__file__).resolve().parents[3] / "cluster" / "monitoring" / "alerts.yml"
FAILURES = {str(code) for code in range(400, 600)}
# What each series' status label can hold (checked against the recording below).
RECORDED = {"ray_horizon_model_calls_total": {"ok"} | FAILURES,
            "ray_horizon_requests_total": {str(code) for code in range(200, 600)}}


def _queries() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return dashboard_queries() + [(f"alert {r['alert']}", r["expr"])
                                  for group in rules["groups"] for r in group["rules"]]


def test_the_code_records_ok_for_an_answered_model_call_and_the_status_otherwise(metrics):
    record_model_call("k2", "ok", 0.1)
    record_model_call("k2", 503, 0.1)
    record_request("general_chat", "k2", 200, 0.1, None, 1, 1)
    metrics.total(MODEL_CALLS.name)  # flushes the counters
    calls = {dict(tags)["status"] for tags in metrics.values[MODEL_CALLS.name]}
    requests = {dict(tags)["status"] for tags in metrics.values[REQUESTS.name]}
    assert calls == {"ok", "503"} <= RECORDED["ray_horizon_model_calls_total"]
    assert requests == {"200"} <= RECORDED["ray_horizon_requests_total"]


@pytest.mark.parametrize("where, expr", _queries())
def test_every_status_matcher_selects_a_value_the_code_records(where, expr):
    for selector in selectors(expr):
        if selector.name not in RECORDED:
            continue
        for matcher in selector.matchers.matchers:
            if matcher.name == "status":
                assert any(accepts(matcher, value) for value in RECORDED[selector.name]), (
                    f"{where}: {selector.name}{{status {matcher.op} {matcher.value!r}}} selects nothing the code records")


def test_the_check_catches_the_old_success_matcher():
    [selector] = selectors('rate(ray_horizon_model_calls_total{status=~"2.."}[5m])')
    [matcher] = selector.matchers.matchers
    assert not any(accepts(matcher, value) for value in RECORDED[selector.name])
