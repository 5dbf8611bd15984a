"""Operator tools against the running simulated fleet over real HTTP (issue 9):
``horizon smoke`` (bring-up checklist, non-zero exit on a broken model) and ``horizon eval``
(labelled replay: markdown + JSON with routing accuracy, success, timeout and fallback rates)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
HORIZON = [sys.executable, "-m", "serve_app.cli"]


def _horizon(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*HORIZON, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def profile_file(serve_sim, tmp_path) -> Path:
    """The profile the endpoint runs, as a file (bare Horizon args are a valid profile)."""
    path = tmp_path / "sim-profile.yaml"
    path.write_text(yaml.safe_dump(serve_sim.args, sort_keys=False))
    return path


def test_smoke_passes_on_a_healthy_model(serve_sim, profile_file, tmp_path):
    out = tmp_path / "smoke.json"
    p = _horizon("smoke", "--config", str(profile_file), "--url", serve_sim.url, "--model", "qwen-72b",
                 "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "smoke: PASS (1/1 models passed)" in p.stdout
    row = next(line for line in p.stdout.splitlines() if line.startswith("| qwen-72b"))
    assert row.count("| ok ") == 4 and "PASS" in row, row
    report = json.loads(out.read_text())
    assert [r["alias"] for r in report] == ["qwen-72b"] and report[0]["ok"] is True
    checks = report[0]["checks"]
    assert set(checks) == {"answers", "stable", "context", "concurrent"}
    assert all(c["ok"] is True for c in checks.values()), checks
    assert "10 identical" in checks["stable"]["detail"]
    assert "400" in checks["context"]["detail"]
    assert report[0]["first_inference_s"] > 0


def test_smoke_checks_the_real_embedder_refuses_an_input_past_its_limit(serve_sim, profile_file, tmp_path):
    out = tmp_path / "smoke.json"
    p = _horizon("smoke", "--config", str(profile_file), "--url", serve_sim.url, "--model", "bge-m3",
                 "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    row = next(line for line in p.stdout.splitlines() if line.startswith("| bge-m3"))
    # Every row of the checklist, on the real embedder: answers, 10 runs the same, the long
    # input refused, 5 texts at once.
    assert row.count("| ok ") == 4 and "n/a" not in row and "PASS" in row, row
    checks = json.loads(out.read_text())[0]["checks"]
    assert checks["context"]["detail"].startswith("400 for ~")
    assert checks["stable"]["detail"].startswith("10 the same") and checks["concurrent"]["detail"].startswith("5/5 ok")



def test_smoke_refuses_a_non_loopback_url(profile_file):
    p = _horizon("smoke", "--config", str(profile_file), "--url", "http://10.1.2.3:8000", "--model", "k2")
    assert p.returncode == 2
    assert "loopback" in p.stderr


def test_eval_writes_markdown_and_json_with_routing_accuracy(serve_sim, tmp_path):
    items = [json.loads(line) for line in (ROOT / "configs/eval/e2e_eval.jsonl").read_text().splitlines() if line.strip()]
    p = _horizon("eval", "--url", serve_sim.url, "--input", "configs/eval/e2e_eval.jsonl",
                 "--out", str(tmp_path), "--concurrency", "4")
    assert p.returncode == 0, p.stdout + p.stderr
    md = (tmp_path / "eval.md").read_text()
    assert "routing accuracy" in md and "e2e success" in md and "fallback rate" in md
    assert md.strip() in p.stdout
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["input"] == "configs/eval/e2e_eval.jsonl"
    assert len(report["items"]) == len(items)
    summary = {row["group"]: row for row in report["summary"]}
    labels = {item["label"] for item in items}
    assert set(summary) == {"overall"} | labels
    overall = summary["overall"]
    assert overall["requests"] == len(items)
    # Routing accuracy comes from the x-vsr-task-type headers of the live endpoint.
    for item in report["items"]:
        if item["status"] == 200:
            assert item["routed_task_type"] is not None, item
            assert item["selected_model"], item
        assert item["routed_correctly"] == (item["routed_task_type"] == item["label"])
    assert overall["routing_accuracy"] == pytest.approx(
        sum(i["routed_correctly"] for i in report["items"]) / len(items), abs=1e-4)
    assert overall["routing_accuracy"] >= 0.8, summary
    assert overall["timeout_rate"] == 0.0
    for label in labels:
        assert f"| {label} " in md
    # Plain text items succeed on the simulated engine.
    plain = [i for i, item in zip(report["items"], items)
             if not item.get("response_format") and not item.get("expect_json")]
    assert plain and all(i["success"] for i in plain if i["label"] != "safety"), plain


def test_eval_min_routing_accuracy_gate(serve_sim, tmp_path):
    # One item labelled against what any router would decide, so a gate of 1.0 must fail (a
    # gate above 1 is a usage error now, exit 2: no run could pass it).
    items = Path("configs/eval/e2e_eval.jsonl").read_text(encoding="utf-8")
    mislabelled = {"id": "e2e-wrong", "messages": [{"role": "user", "content": "Hello there!"}], "label": "vision"}
    path = tmp_path / "items.jsonl"
    path.write_text(items.rstrip("\n") + "\n" + json.dumps(mislabelled) + "\n", encoding="utf-8")
    p = _horizon("eval", "--url", serve_sim.url, "--input", str(path), "--out", str(tmp_path),
                 "--min-routing-accuracy", "1.0")
    assert p.returncode == 1
    assert "routing accuracy" in p.stderr
