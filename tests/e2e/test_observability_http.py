"""Observability over real HTTP (issue 8): Prometheus series after traffic, /health per model,
X-Request-ID echoed."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from conftest import serve_log_lines

pytestmark = pytest.mark.e2e

CODE_PROMPT = "Write a Python function that checks whether a string is a palindrome."
CHAT_PROMPT = "How do I politely decline a meeting invitation from a colleague?"
FUSION_PROMPT = "Ask the panel of models: is Rust or Go better for a small web service?"

# Series every answered request, model call, breaker, queue, Fusion run and routing decision
# must leave behind (names as Ray exports them: ray_ prefix, _total / _bucket suffixes).
EXPECTED_SERIES = [
    "ray_horizon_requests_total",
    "ray_horizon_request_latency_seconds_bucket",
    "ray_horizon_time_to_first_token_seconds_bucket",
    "ray_horizon_prompt_tokens_total",
    "ray_horizon_completion_tokens_total",
    "ray_horizon_model_calls_total",
    "ray_horizon_model_call_latency_seconds_bucket",
    "ray_horizon_breaker_state",
    "ray_horizon_queue_depth",
    "ray_horizon_fusion_stage_seconds_bucket",
    "ray_horizon_routing_latency_seconds_bucket",
]


def _metrics_url() -> str:
    import ray

    node = next(n for n in ray.nodes() if n["Alive"])
    return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"


def _post(serve_sim, body, **kw) -> httpx.Response:
    return httpx.post(f"{serve_sim.base_url}/chat/completions", json=body, timeout=120, **kw)


def _traffic(serve_sim) -> None:
    assert _post(serve_sim, {"model": "vllm-sr/auto",
                             "messages": [{"role": "user", "content": CODE_PROMPT}]}).status_code == 200
    with httpx.stream("POST", f"{serve_sim.base_url}/chat/completions", timeout=120,
                      json={"model": "vllm-sr/auto", "stream": True,
                            "messages": [{"role": "user", "content": CHAT_PROMPT}]}) as r:
        assert r.status_code == 200
        assert list(r.iter_lines())
    assert _post(serve_sim, {"model": "vllm-sr/fusion",
                             "messages": [{"role": "user", "content": FUSION_PROMPT}]}).status_code == 200
    assert _post(serve_sim, {"model": "gpt-17",
                             "messages": [{"role": "user", "content": "x"}]}).status_code == 404


def _series(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            out.setdefault(name, []).append(line)
    return out


def _problems(series: dict[str, list[str]]) -> list[str]:
    """What the scrape still lacks (empty = every expected series and label set is there)."""
    missing = [name for name in EXPECTED_SERIES if name not in series]
    if missing:
        return [f"missing series {missing}"]
    problems = []
    requests = series["ray_horizon_requests_total"]
    if not any('decision="code"' in s and 'model="coder"' in s and 'status="200"' in s for s in requests):
        problems.append("no 200 for decision code / model coder")
    if not any('model="vllm-sr/fusion"' in s and 'decision="fusion_panel"' in s for s in requests):
        problems.append("no fusion_panel request")
    if not any('status="404"' in s for s in requests):
        problems.append("no 404 request")
    calls = series["ray_horizon_model_calls_total"]
    for model in ("coder", "qwen-72b", "r1-distill", "k2"):
        if not any(f'model="{model}"' in s and 'status="ok"' in s for s in calls):
            problems.append(f"no ok call for {model}")
    stages = series["ray_horizon_fusion_stage_seconds_bucket"]
    for stage in ("panel", "analysis", "synthesis"):
        if not any(f'stage="{stage}"' in s for s in stages):
            problems.append(f"no fusion stage {stage}")
    if not [s for s in series["ray_horizon_breaker_state"] if 'model="coder"' in s]:
        problems.append("no breaker state for coder")
    return problems


def test_prometheus_series_after_traffic(serve_sim):
    _traffic(serve_sim)
    url = _metrics_url()
    # Ray exports on an interval, and earlier tests in the session may already have exported the
    # same metric names: poll until this test's own label sets are there, not just the names.
    deadline = time.monotonic() + 90
    series: dict[str, list[str]] = {}
    problems = ["not scraped yet"]
    while time.monotonic() < deadline and problems:
        try:
            series = _series(httpx.get(url, timeout=10).text)
        except httpx.HTTPError:
            series = {}
        problems = _problems(series)
        if problems:
            time.sleep(3)
    assert not problems, (problems, sorted(n for n in series if "horizon" in n))

    breaker = [s for s in series["ray_horizon_breaker_state"] if 'model="coder"' in s]
    assert float(breaker[0].rsplit(" ", 1)[1]) in (0.0, 1.0, 2.0)
    # Ray Serve's own tags ride along.
    assert all('deployment="ingress"' in s for s in series["ray_horizon_requests_total"])


def test_health_reports_per_model_facts(serve_sim):
    for _ in range(3):
        assert _post(serve_sim, {"model": "qwen-72b",
                                 "messages": [{"role": "user", "content": CHAT_PROMPT}]}).status_code == 200
    body = httpx.get(f"{serve_sim.url}/health", timeout=30).json()
    assert body["status"] == "ready"
    for alias in ("k2", "qwen-72b", "r1-distill", "coder", "minicpm-v"):
        m = body["models"][alias]
        assert m["status"] == "HEALTHY" and m["replicas"] >= 1
        assert m["breaker_state"] == "closed"
        assert m["queue_length"] == 0
        for key in ("latency_p50_ms", "latency_p95_ms", "success_rate", "requests_total", "in_flight",
                    "estimated_queue_wait_s"):
            assert key in m, (alias, key)
    q = body["models"]["qwen-72b"]
    # Per ingress replica (the sim profile may run two after the autoscaling tests): at least one
    # of the three landed on the replica that answered /health.
    assert q["requests_total"] >= 1
    assert q["success_rate"] == 1.0
    assert q["latency_p50_ms"] > 0 and q["latency_p95_ms"] >= q["latency_p50_ms"]
    assert body["models"]["bge-m3"]["status"] == "HEALTHY"


@pytest.mark.parametrize("body,status", [
    ({"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]}, 200),
    ({"model": "vllm-sr/auto", "messages": [{"role": "user", "content": CODE_PROMPT}]}, 200),
    ({"model": "gpt-17", "messages": [{"role": "user", "content": "x"}]}, 404),
    ({"model": "qwen-72b", "messages": []}, 400),
])
def test_request_id_echoed(serve_sim, body, status):
    rid = f"obs-test-{status}-{body['model'].replace('/', '-')}"
    r = _post(serve_sim, body, headers={"X-Request-ID": rid})
    assert r.status_code == status
    assert r.headers["x-request-id"] == rid


def test_request_id_echoed_on_stream_and_generated_when_absent(serve_sim):
    with httpx.stream("POST", f"{serve_sim.base_url}/chat/completions", timeout=60,
                      headers={"X-Request-ID": "obs-stream-1"},
                      json={"model": "coder", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
        assert r.headers["x-request-id"] == "obs-stream-1"
        list(r.iter_lines())
    ids = {_post(serve_sim, {"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]})
           .headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3 and all(ids)


def test_a_replicas_log_lines_reach_its_file_within_seconds(serve_sim):
    """In the fast mode Serve buffers a replica's log lines 1,000 at a time: a lone request's
    access line stayed in memory (serve_app.observability.replica_logs). Now it is in the
    ingress replica's file, under the client's request id, within the flush interval."""
    rid = f"obs-log-{uuid.uuid4().hex[:10]}"
    assert _post(serve_sim, {"model": "qwen-72b", "messages": [{"role": "user", "content": "hi"}]},
                 headers={"X-Request-ID": rid}).status_code == 200
    answered = time.monotonic()
    lines = serve_log_lines("replica_sim_ingress_*.log", rid, within_s=10)
    assert lines, "the request's access line never reached the ingress replica's log"
    print(f"in the log after {time.monotonic() - answered:.1f} s: {lines[0]}")
    assert time.monotonic() - answered < 5
    assert "POST" in lines[0] and " 200 " in lines[0]
