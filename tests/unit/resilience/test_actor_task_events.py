"""The gateway's own actors are called several times a second for as long as the application
runs (breaker sync 4/s per ingress replica, demand reports 2/s, a demand read per autoscaling
poll). Ray's GCS keeps the events of every task (≈ 3 KB each, up to 100,000 of them), so with
task events on, its memory climbs for hours: 1.9 MiB/min at idle on the sim profile
(loadtests/bench_task_events.py). Both actors are created with task events off."""

from __future__ import annotations

import pytest

from deployments.gateway_demand import connect_board
from serve_app.config.resilience import BreakerSettings
from serve_app.resilience.breaker_ray import RayBreakerStore
from tests.fakes.ray_remote import FakeRayRemote


@pytest.mark.parametrize("connect, actor", [
    (lambda: RayBreakerStore.connect(BreakerSettings(), app_name="sim"), "BreakerRegistry"),
    (lambda: connect_board("sim"), "GatewayDemandBoard"),
])
def test_the_gateways_actors_keep_no_task_events(monkeypatch, connect, actor):
    import ray

    fake = FakeRayRemote()
    monkeypatch.setattr(ray, "remote", fake.remote)
    connect()
    opts = fake.options[actor]
    assert opts["enable_task_events"] is False
    # Still the one detached, named actor per application that every replica shares.
    assert opts["lifetime"] == "detached" and opts["get_if_exists"] is True
    assert opts["name"].endswith(":sim")
