"""A broken model, over real HTTP: the simulated fleet with coder failing every call
(``error_rate: 1.0``), as an application of its own (``/broken``) deployed once for the module.

* a direct call with no fallback is a typed 502/503 naming coder, and the service stays up;
* Fusion records the failing panel member and synthesises while its quorum holds; a quorum it
  cannot reach is a typed 502 before any judge call;
* ``horizon smoke`` exits non-zero naming the broken model.

The module's breaker threshold is out of reach so that the order of the tests does not matter
(breakers are tested in test_resilience_faults.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from openai import OpenAI

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PANEL = ["qwen-72b", "r1-distill", "coder"]
FUSION_PROMPT = "Ask the panel of models: what are the trade-offs between Rust and Go for a web service?"


@pytest.fixture(scope="module")
def broken(serve_sim):
    models = [dict(m, simulated={**m["simulated"], "error_rate": 1.0}) if m["alias"] == "coder" else m
              for m in serve_sim.args["models"]]
    with serve_sim.variant("broken", {"models": models,
                                      "resilience": {"breaker": {"failure_threshold": 1000}}}) as profile:
        yield profile


def test_failing_backend_is_502_and_service_stays_up(broken):
    r = httpx.post(f"{broken.base_url}/chat/completions", headers={"x-vsr-allow-fallback": "false"},
                   json={"model": "coder", "messages": [{"role": "user", "content": "x"}]}, timeout=60)
    assert r.status_code in (502, 503)
    assert "coder" in r.json()["error"]["message"]
    assert "Traceback" not in r.text
    ok = httpx.post(f"{broken.base_url}/chat/completions",
                    json={"model": "qwen-72b", "messages": [{"role": "user", "content": "x"}]}, timeout=60)
    assert ok.status_code == 200


def test_failing_panel_member_recorded_while_quorum_holds(broken):
    client = OpenAI(base_url=broken.base_url, api_key="unused", max_retries=0, timeout=120)
    resp = client.chat.completions.with_raw_response.create(
        model="vllm-sr/fusion", messages=[{"role": "user", "content": FUSION_PROMPT}])
    completion = resp.parse()
    trace = json.loads(resp.http_response.text)["fusion"]
    assert completion.choices[0].message.content.startswith("[simulated k2]")
    failed = trace["failed_models"]
    assert [f["model"] for f in failed] == ["coder"]
    assert failed[0]["status"] == "error" and "simulated engine failure" in failed[0]["error"]
    assert trace["usable_responses"] == 2
    statuses = {r["model"]: r["status"] for r in trace["responses"]}
    assert statuses == {"qwen-72b": "ok", "r1-distill": "ok", "coder": "error"}
    assert resp.headers["x-vsr-fusion-failed"] == "coder"
    assert resp.headers["x-vsr-fusion-usable"] == "2"
    # A panel member is never replaced by a fallback model.
    assert "x-vsr-fallback" not in resp.headers

    # Quorum 3 with one member down: a typed 5xx listing the failure, before any judge call.
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model="vllm-sr/fusion", messages=[{"role": "user", "content": FUSION_PROMPT}],
            extra_body={"plugins": [{"id": "fusion", "analysis_models": PANEL,
                                     "min_successful_responses": 3}]})
    assert info.value.status_code == 502
    err = info.value.response.json()["error"]
    assert err["code"] == "fusion_panel_failed"
    assert "coder" in info.value.response.text


def test_smoke_fails_on_a_broken_model(broken, tmp_path):
    profile_file = tmp_path / "broken-profile.yaml"   # bare Horizon args are a valid profile
    profile_file.write_text(yaml.safe_dump(broken.args, sort_keys=False))
    p = subprocess.run([sys.executable, "-m", "serve_app.cli", "smoke", "--config", str(profile_file),
                        "--url", broken.url, "--model", "coder", "--model", "qwen-72b"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "smoke: FAIL (1/2 models passed)" in p.stdout
    coder = next(line for line in p.stdout.splitlines() if line.startswith("| coder"))
    assert "FAIL" in coder and "not run" in coder
