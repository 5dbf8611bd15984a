"""Live routing settings on real Ray Serve (serve_app.config.live).

The simulated fleet is deployed the way ``serve deploy`` and ``horizon serve`` deploy a profile:
as a Serve config, handed to the controller, with live settings in the ingress's ``user_config``
(``applications[0].deployments``): a keyword added to the ``fusion`` rule, in effect from the
ingress's start. Then the override is removed, replaced by invalid settings (sent
past ``horizon validate``, as ``serve deploy`` would) and set again. After each change the
routing answers as configured (invalid settings leave the previous ones, and ``/health`` names
the key), and no replica of any deployment was restarted: Serve reconfigured the running
ingress.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable

import httpx
import pytest

from conftest import deep_merge, profile_args, wait_ready

pytestmark = pytest.mark.e2e

APP = "live"
QUESTION = "council: what is the capital of France?"
COUNCIL = {"routing": {"signals": {"keywords": {"fusion": {
    "keywords": ["fusion", "ask the panel", "panel of models", "council"]}}}}}


def _apply(args: dict[str, Any], ingress_user_config: Any = None) -> None:
    """Deploy the profile as a Serve config (what ``serve deploy FILE`` sends), beside the
    cluster's other config-deployed applications."""
    from ray.serve.context import _get_global_client

    from serve_app.tools.serve import deploy_beside_others

    app: dict[str, Any] = {"name": APP, "route_prefix": f"/{APP}", "import_path": "serve_app.app:build_app",
                           "args": args}
    if ingress_user_config is not None:
        app["deployments"] = [{"name": "ingress", "user_config": ingress_user_config}]
    deploy_beside_others(_get_global_client(), {"applications": [app]})


def _replicas() -> dict[str, set[str]]:
    """Each deployment of the application: the ids of its running replicas."""
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeInstanceDetails

    details = ServeInstanceDetails(**_get_global_client().get_serve_details())
    return {name: {r.replica_id for r in d.replicas if r.state == "RUNNING"}
            for name, d in details.applications[APP].deployments.items()}


def _decision(url: str) -> str:
    r = httpx.post(f"{url}/v1/route", json={"model": "auto", "messages": [{"role": "user", "content": QUESTION}]},
                   timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["decision"]


def _until(check: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1.0)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


@pytest.fixture(scope="module")
def live_app(serve_cluster, redis_url):
    """The simulated fleet as a Serve config whose ingress starts with live settings."""
    from ray import serve

    run = uuid.uuid4().hex[:8]
    args = deep_merge(profile_args("sim"), {
        "simulation": {"latency_scale": 0.01},
        # Two ingress replicas: each must take every change, and /health must say when both have.
        "global": {"server": {"min_replicas": 2, "max_replicas": 2}},
        "sessions": {"redis_url": redis_url, "key_prefix": f"horizon:e2e-live:{run}:session:"},
        "auth": {"redis_key_prefix": f"horizon:e2e-live:{run}:ratelimit:"}})
    url = f"{serve_cluster}/{APP}"
    _apply(args, COUNCIL)
    wait_ready(url, timeout_s=600)
    try:
        yield args, url
    finally:
        serve.delete(APP)


def _roll_call(url: str) -> dict[str, Any]:
    """/health's roll call of the ingress replicas (whichever replica answers)."""
    return httpx.get(f"{url}/health", timeout=30).json().get("ingress") or {}


def _all_ingress_replicas_on(url: str, unlike: str = "") -> str:
    """Wait until /health's roll call has both ingress replicas routing with one set of settings
    (other than ``unlike``); that digest."""
    def one_digest() -> Any:
        roll_call = _roll_call(url)
        settings = roll_call.get("routing_settings") or {}
        if roll_call.get("replicas") == 2 and roll_call.get("routing") == {"ready": 2} and len(settings) == 1:
            digest, count = next(iter(settings.items()))
            if count == 2 and digest != unlike:
                return digest
        return None

    return _until(one_digest, "both ingress replicas route with the same new settings")


def test_routing_settings_change_live_and_no_replica_restarts(live_app):
    args, url = live_app
    # Started with the live settings, on both ingress replicas.
    live_digest = _all_ingress_replicas_on(url)
    assert httpx.get(f"{url}/health", timeout=30).json()["routing_settings"] == live_digest
    assert _decision(url) == "fusion_panel"
    before = _replicas()
    assert len(before["ingress"]) == 2 and all(before.values()), before

    # 1. The override removed: the profile's own keywords, through a reconfigure. /health's
    #    roll call says when every replica has them.
    _apply(args)
    profile_digest = _all_ingress_replicas_on(url, unlike=live_digest)
    health = wait_ready(url, timeout_s=60)
    assert "routing_update" not in health and health["routing_settings"] == profile_digest, health
    assert all(_decision(url) != "fusion_panel" for _ in range(6))
    assert _replicas() == before, "a change of the live settings restarted a replica"

    # 2. Invalid settings (past horizon validate, as serve deploy would send them): the ingress
    #    keeps the previous ones and /health names the key.
    _apply(args, deep_merge(COUNCIL, {"routing": {"signals": {"short_text": {"max_chars": -1}}}}))

    def failed_update() -> Any:
        body = httpx.get(f"{url}/health", timeout=30).json()
        return body if body.get("routing_update", {}).get("status") == "failed" else None

    body = _until(failed_update, "/health reports the rejected settings")
    _until(lambda: _roll_call(url).get("routing") == {"failed": 2}, "both replicas rejected the settings")
    assert body["status"] == "degraded"
    assert "routing.signals.short_text.max_chars" in body["routing_update"]["detail"], body["routing_update"]
    assert _decision(url) != "fusion_panel" and body["routing_settings"] == profile_digest
    assert _replicas() == before

    # 3. The keyword added again: fusion_panel, the failure cleared, still no restart.
    _apply(args, COUNCIL)
    assert _all_ingress_replicas_on(url, unlike=profile_digest) == live_digest
    health = wait_ready(url, timeout_s=60)
    assert "routing_update" not in health and health["routing_settings"] == live_digest, health
    assert all(_decision(url) == "fusion_panel" for _ in range(6))
    assert _replicas() == before
