"""A deployment that cannot be scheduled: requests that need it fail fast with the reason,
everything else keeps working, and /health says which deployment and why.

The simulated fleet is deployed as its own application with one model asking for a custom
resource no node has, so Serve leaves its replica pending forever (as the CPU engine's placement
group did on two cores before it was fixed). Also: ``horizon serve`` refuses to start beside a
running Ray cluster, changing nothing of it.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from conftest import ROOT, deep_merge, profile_args

pytestmark = pytest.mark.e2e

APP = "pending"


@pytest.fixture(scope="module")
def pending_app(serve_cluster):
    from ray import serve
    from ray.serve.api import RunTarget

    from serve_app.app import build_app

    args = deep_merge(profile_args("sim"), {"simulation": {"latency_scale": 0.01}})
    coder = next(m for m in args["models"] if m["alias"] == "coder")
    coder["placement"] = {"num_cpus": 0.1, "resources": {"no_such_node": 1}}
    # Not waiting for RUNNING: with coder pending the application never gets there.
    serve.run_many([RunTarget(build_app(args), name=APP, route_prefix=f"/{APP}")],
                   wait_for_applications_running=False)
    url = f"{serve_cluster}/{APP}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:            # routing up: every model but coder is running
        try:
            body = httpx.get(f"{url}/health", timeout=10).json()
            if not body.get("error") and body["models"]["bge-m3"]["status"] == "HEALTHY" \
                    and body["models"]["k2"]["status"] == "HEALTHY":
                break
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(1)
    yield url
    serve.delete(APP)


def test_a_request_for_the_pending_model_is_a_fast_503_naming_its_deployment(pending_app):
    started = time.monotonic()
    deadline = started + 30
    while True:       # the ingress learns the deployment states within its refresh period
        r = httpx.post(f"{pending_app}/v1/chat/completions", timeout=30,
                       headers={"x-vsr-allow-fallback": "false"},
                       json={"model": "coder", "messages": [{"role": "user", "content": "hi"}]})
        if r.status_code == 503 or time.monotonic() > deadline:
            break
    assert r.status_code == 503, r.text
    assert int(r.headers["retry-after"]) >= 1
    error = r.json()["error"]
    assert "model-coder" in error["message"] and error["code"] == "model_unavailable"
    assert time.monotonic() - started < 35, "within coder's 60 s timeout, not after it"


def test_with_fallback_the_chain_skips_the_pending_model_at_once(pending_app):
    r = httpx.post(f"{pending_app}/v1/chat/completions", timeout=60, json={
        "model": "coder", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    assert r.headers["x-vsr-fallback"].startswith("coder:unavailable,")


def test_unknown_model_is_404_and_other_models_serve(pending_app):
    r = httpx.post(f"{pending_app}/v1/chat/completions", json={
        "model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404
    ok = httpx.post(f"{pending_app}/v1/chat/completions", timeout=60, json={
        "model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200


def test_health_names_the_deployment_and_serves_reason_within_60_s(pending_app):
    deadline = time.monotonic() + 60
    while True:
        body = httpx.get(f"{pending_app}/health", timeout=10).json()
        coder = body["models"]["coder"]
        if "reason" in coder and "scheduled" in coder["reason"] or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert body["status"] == "starting" and "model-coder" in body["waiting_for"]
    assert coder["status"] == "UPDATING" and coder["replicas"] == 0
    assert "taken more than" in coder["reason"] and "no_such_node" in coder["reason"]


def test_horizon_serve_refuses_to_start_beside_a_running_cluster(serve_sim):
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "horizon"), "serve", "configs/sim.yaml"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "a Ray cluster is already running on this machine" in result.stderr
    assert httpx.get(f"{serve_sim.url}/health", timeout=10).json()["status"] == "ready"
