"""`horizon route` with escalations classified by the real tiny k2 engine in-process (vLLM
SmolLM2-135M), no Ray: the trained intent head is removed (template cosine) and the threshold
raised, so that every request the embedding decides escalates to the classifier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serve_app.config.base import TASK_TYPES

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_horizon_route_escalates_to_the_real_k2_engine(tmp_path):
    from deployments.model_assets import build_smollm2

    build_smollm2()
    doc = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    intent = doc["applications"][0]["args"]["routing"]["signals"]["intent"]
    intent.pop("head", None)
    intent["thresholds"] = {k: 0.99 for k in intent["thresholds"]}
    # The profile's 10 s per attempt is the serving budget; this test proves that the real engine
    # classifies, and on a loaded 2-core CI machine (the shared test cluster runs beside it, the
    # machine 3-6x slower on some days) one constrained answer took over 10 s.
    intent["classifier"]["timeout_s"] = 300
    profile = tmp_path / "escalate.yaml"
    profile.write_text(yaml.safe_dump(doc, sort_keys=False))
    items = [("Write a Go function that parses a YAML file into a struct.", "code"),
             ("What is the probability that three coin tosses all land heads?", "reasoning"),
             ("My sourdough starter smells like nail polish remover, is it ruined?", "chat")]
    inp = tmp_path / "items.jsonl"
    inp.write_text("".join(json.dumps({"messages": [{"role": "user", "content": t}], "label": label}) + "\n"
                           for t, label in items))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    horizon = Path(sys.executable).with_name("horizon")
    run = subprocess.run([str(horizon), "route", "--config", str(profile),
                          "--input", str(inp), "--labels"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "vLLM engine in-process" in run.stderr.splitlines()[0]
    lines = [json.loads(line) for line in run.stdout.splitlines()]  # vLLM's logs stay off stdout
    assert len(lines) == 3
    for line in lines:
        assert line["escalated"] is True
        assert line["classifier_ms"] > 0, "the classifier really ran"
        assert line["task_type"] in TASK_TYPES
        assert {"decision", "model", "confidence", "signals", "latency_ms"} <= set(line)
    assert "k2 escalations: 100.0%" in run.stderr
    # The engine answered each escalation within the classifier's timeout (whatever it said).
    assert "timed out" not in run.stderr, run.stderr[-3000:]
