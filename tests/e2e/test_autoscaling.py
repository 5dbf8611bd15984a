"""Queue-depth autoscaling on the real Ray Serve graph: load takes a model 1 → 2 replicas → 1.

Uses the lead's session fixture ``serve_sim`` (tests/e2e/conftest.py): the simulated fleet on
Ray Serve, ``serve_sim.url`` its HTTP base, ``serve_sim.args`` its Horizon args and
``serve_sim.deploy(overrides)`` to redeploy with overrides deep-merged (lists replaced).
"""

from __future__ import annotations

import copy
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.e2e

ALIAS = "qwen-72b"


def _replicas(url: str) -> int:
    body = httpx.get(f"{url}/health", timeout=30).json()
    return int(body["models"][ALIAS].get("replicas", 0))


def _wait_for(url: str, predicate, timeout_s: float) -> list[int]:
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen.append(_replicas(url))
        if predicate(seen[-1]):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"replicas never satisfied the condition in {timeout_s}s: {seen[-20:]}")


def _scaling_overrides(args: dict) -> dict:
    models = copy.deepcopy(args["models"])
    for m in models:
        if m["alias"] == ALIAS:
            # ≈0.8 s per request at the fixture's global latency_scale 0.01; 2 decoding slots.
            m["simulated"] = {"ttft_ms": 300, "tpot_ms": 10, "output_tokens": 50, "max_num_seqs": 2,
                              "latency_scale": 100}
            # Queueing is the point here: deadlines far above the queue wait, so no request times
            # out and falls back to k2 (the profile scales timeouts down with its latencies).
            m["timeouts"] = {"first_token_s": 1200, "total_s": 1200}
            m["scaling"] = {"min_replicas": 1, "max_replicas": 2, "max_ongoing_requests": 8,
                            "policy": "queue_depth", "target_queue_per_replica": 1,
                            "upscale_delay_s": 1, "downscale_delay_s": 5, "metrics_interval_s": 0.5,
                            "look_back_period_s": 2}
    return {"models": models}


def test_load_scales_a_model_up_and_back_down(serve_sim):
    serve_sim.deploy(_scaling_overrides(serve_sim.args))
    try:
        assert _replicas(serve_sim.url) == 1
        stop = threading.Event()
        errors: list[str] = []

        def client() -> None:
            with httpx.Client(timeout=60) as http:
                while not stop.is_set():
                    r = http.post(f"{serve_sim.url}/v1/chat/completions",
                                  headers={"x-vsr-allow-fallback": "false"},
                                  json={"model": ALIAS, "max_tokens": 50,
                                        "messages": [{"role": "user", "content": "hello there, how are you?"}]})
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:100]}")
                    elif r.headers.get("x-vsr-selected-model") != ALIAS:
                        errors.append(f"served by {r.headers.get('x-vsr-selected-model')}")

        # 10 concurrent clients vs 2 slots + 1 waiting per replica: 10 / 3 -> wants 4, capped at 2.
        threads = [threading.Thread(target=client, daemon=True) for _ in range(10)]
        for t in threads:
            t.start()
        try:
            _wait_for(serve_sim.url, lambda n: n >= 2, timeout_s=90)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert len(errors) < 5, errors[:5]
        # Idle: back to min_replicas after downscale_delay_s (+ replica shutdown).
        _wait_for(serve_sim.url, lambda n: n == 1, timeout_s=90)
    finally:
        serve_sim.deploy()
