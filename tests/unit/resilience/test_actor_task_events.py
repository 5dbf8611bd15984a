"""The gateway's own actors are called several times a second for as long as the application
runs (breaker sync 4/s per ingress replica, demand reports 2/s, a demand read per autoscaling
poll). Ray's GCS keeps the events of every task (≈ 3 KB each, up to 100,000 of them), so with
task events on, its memory climbs for hours: 1.9 MiB/min at idle on the sim profile
(loadtests/bench_task_events.py). The application's state actor, which hosts both, is created
with task events off."""

from __future__ import annotations

from serve_app.app_state import connect_application_state
from tests.fakes.ray_remote import FakeRayRemote


def test_the_gateways_actor_keeps_no_task_events(monkeypatch):
    import ray

    fake = FakeRayRemote()
    monkeypatch.setattr(ray, "remote", fake.remote)
    connect_application_state("sim")
    opts = fake.options["ApplicationState"]
    assert opts["enable_task_events"] is False
    # Still the one detached, named actor per application that every replica shares.
    assert opts["lifetime"] == "detached" and opts["get_if_exists"] is True
    assert opts["name"].endswith(":sim")
