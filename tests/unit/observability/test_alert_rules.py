"""The alert rules (cluster/monitoring/alerts.yml, SPEC §8's threshold alerts) are rules
Prometheus loads, over series the code exports, with the values the code records."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml
from promql_helpers import parse, series

from serve_app.observability.metrics import BREAKER_STATE_VALUES, RAY_BUILTIN_SERIES, exported_series

MONITORING = Path(__file__).resolve().parents[3] / "cluster" / "monitoring"
RULES = MONITORING / "alerts.yml"


def _rules() -> list[dict]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_prometheus_loads_the_rules_file_beside_its_config():
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["rule_files"] == ["alerts.yml"]  # relative to prometheus.yml, as Prometheus reads it
    assert RULES.exists()


def test_every_rule_is_one_prometheus_accepts():
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert set(document) == {"groups"}
    names = [g["name"] for g in document["groups"]]
    assert len(names) == len(set(names))
    alerts = [rule["alert"] for rule in _rules()]
    assert len(alerts) == len(set(alerts)) >= 8
    for rule in _rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"Horizon[A-Z][A-Za-z]+", rule["alert"])
        parse(rule["expr"])  # ValueError naming the problem
        promql_parser.parse_duration(rule["for"])
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_rules_query_only_series_the_code_exports_or_ray_builtins():
    known = exported_series() | RAY_BUILTIN_SERIES
    unknown = {(rule["alert"], name) for rule in _rules() for name in series(rule["expr"]) if name not in known}
    assert not unknown, unknown


@pytest.mark.parametrize("alert, subject", [
    ("HorizonBreakerOpen", "ray_horizon_breaker_state"),
    ("HorizonModelSuccessRateLow", "ray_horizon_model_calls_total"),
    ("HorizonModelLatencyHigh", "ray_horizon_model_call_latency_seconds_bucket"),
    ("HorizonAdmissionQueueNotDraining", "ray_horizon_queue_depth"),
    ("HorizonDeploymentDown", "ray_serve_deployment_replica_healthy"),
    ("HorizonNodeMemoryHigh", "ray_node_mem_used"),
    ("HorizonEngineKVCacheFull", "ray_vllm_kv_cache_usage_perc"),
    ("HorizonEngineQueueWait", "ray_vllm_request_queue_time_seconds_bucket"),
])
def test_the_health_panels_subjects_each_have_an_alert(alert, subject):
    # SPEC §8: per-model latency, success rate, queue length, memory; threshold alerts. The
    # vLLM names are those a real engine exported through ray.serve.llm (configs/local.yaml).
    rule = next(r for r in _rules() if r["alert"] == alert)
    assert subject in series(rule["expr"])


def test_the_breaker_alert_fires_on_any_state_but_the_closed_one_the_code_records():
    # Open and half-open alternate while probes fail; only closed (the lowest value) is health.
    rule = next(r for r in _rules() if r["alert"] == "HorizonBreakerOpen")
    values = BREAKER_STATE_VALUES
    assert values["closed"] < values["half_open"] < values["open"]
    assert rule["expr"].strip().endswith(f">= {values['half_open']}")
    assert "min_over_time(ray_horizon_breaker_state[1m])" in rule["expr"]


def test_every_alert_has_a_promtool_case():
    cases = yaml.safe_load((MONITORING / "alerts_test.yml").read_text(encoding="utf-8"))
    assert cases["rule_files"] == ["alerts.yml"]
    tested = {check["alertname"] for test in cases["tests"] for check in test["alert_rule_test"]}
    firing = {check["alertname"] for test in cases["tests"] for check in test["alert_rule_test"]
              if check["exp_alerts"]}
    alerts = {rule["alert"] for rule in _rules()}
    assert tested == firing == alerts  # each seen firing, and quiet where it should be


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed: scripts/promtool.sh installs it (scripts/test.sh runs it)")
    return found


def test_promtool_sees_each_alert_fire_on_its_series_and_stay_quiet_on_the_others(promtool):
    # Prometheus's own rule engine evaluates the rules over synthetic series
    # (cluster/monitoring/alerts_test.yml): a threshold, a label that does not match, an
    # `and` that binds differently than meant would fail here.
    checked = subprocess.run([promtool, "check", "rules", "alerts.yml"], cwd=MONITORING,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=MONITORING,
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_accepts_the_scrape_config_and_finds_the_rules_beside_it(promtool, tmp_path):
    # Debian's promtool is built without Kubernetes discovery, so the KubeRay job is left out of
    # the copy it checks; the other jobs, the globals and rule_files are checked as written.
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text(encoding="utf-8"))
    config["scrape_configs"] = [job for job in config["scrape_configs"] if "kubernetes_sd_configs" not in job]
    assert len(config["scrape_configs"]) >= 2
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    shutil.copy(RULES, tmp_path / "alerts.yml")
    checked = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 rule files found" in checked.stdout
