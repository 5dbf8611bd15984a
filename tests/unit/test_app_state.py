"""The application's one state actor hosts the breaker registry and the demand board: both work
through one handle, neither sees the other's state, and every remote call of either body is
one of the actor's (a method added to a body and not to the actor would fail only on a cluster)."""

from __future__ import annotations

import inspect

import pytest

from deployments.gateway_demand import DemandPublisher, GatewayDemandBoard, GatewayDemandReader
from serve_app.app_state import ApplicationState, connect_application_state
from serve_app.config.resilience import BreakerSettings
from serve_app.resilience.breaker import CircuitBreaker
from serve_app.resilience.breaker_ray import BreakerRegistry, RayBreakerStore
from tests.fakes.ray_remote import FakeActorHandle


# ray.remote(cls) adds this keyword to every method of the class itself, in place (Ray's
# tracing hook), so once any code in the process has made the actor, the signatures carry it.
RAY_TRACE_KEYWORD = "_ray_trace_ctx"
# The bodies' helpers for the actor itself, which replicas never call remotely.
NOT_REMOTE = {"reply",             # the registry's answer to a sync or a watch
              "reported_lately"}   # the board's, read by the actor's retirement of earlier actors


def _public_methods(cls: type) -> dict[str, list[inspect.Parameter]]:
    return {name: [p for p in inspect.signature(fn).parameters.values() if p.name != RAY_TRACE_KEYWORD]
            for name, fn in vars(cls).items() if callable(fn) and not name.startswith("_")}


@pytest.mark.parametrize("body", [BreakerRegistry, GatewayDemandBoard])
def test_every_call_of_each_body_is_the_actors_with_its_signature(body):
    import ray

    ray.remote(ApplicationState)       # as the gateway makes it (no cluster needed for this)
    actor = _public_methods(ApplicationState)
    for name, signature in _public_methods(body).items():
        if name in NOT_REMOTE:
            continue
        assert name in actor, f"ApplicationState does not forward {body.__name__}.{name}"
        assert actor[name] == signature, name
        assert inspect.iscoroutinefunction(getattr(ApplicationState, name)) == \
            inspect.iscoroutinefunction(getattr(body, name)), name


@pytest.mark.asyncio
async def test_breakers_and_demand_share_one_handle_without_mixing():
    state = ApplicationState()
    handle = FakeActorHandle(state)
    settings = BreakerSettings(failure_threshold=2, sync_interval_s=0.01)
    store = RayBreakerStore(handle, settings)
    other_replica = RayBreakerStore(handle, settings)
    for _ in range(2):
        CircuitBreaker("k2", store).try_acquire().failure()
    await store.sync_once()
    publisher = DemandPublisher(lambda: {"model-k2": 7}, lambda: handle, source="ingress-a",
                                routing=lambda: {"routing": "ready"})
    await publisher.publish_once()
    reader = GatewayDemandReader("model-k2", "sim", lookup=lambda: handle)

    # The other replica learns the open breaker from the actor; the model replica reads the
    # backlog from the same actor; the board's roll call counts the one ingress replica.
    await other_replica.sync_once()
    assert CircuitBreaker("k2", other_replica).state().state == "open"
    assert await reader.read() == 7.0
    assert publisher.roll_call == {"replicas": 1, "routing_settings": {}, "routing": {"ready": 1}}
    # Neither body holds the other's entries.
    assert state.states().keys() == {"k2"}
    assert state.snapshot() == {"sources": 1, "waiting": {"model-k2": 7.0}}
    assert state.settings()["failure_threshold"] == 2


def test_the_creating_calls_breaker_settings_are_the_registrys_before_any_configure(monkeypatch):
    """Ray re-runs a restarted actor's constructor with its creating call's arguments, so a
    restarted state actor keeps the application's breaker settings rather than the defaults."""
    import ray

    from tests.fakes.ray_remote import FakeRayRemote

    fake = FakeRayRemote()
    monkeypatch.setattr(ray, "remote", fake.remote)
    strict = BreakerSettings(failure_threshold=2).model_dump()
    state = connect_application_state("sim", strict)
    assert state.settings()["failure_threshold"] == 2 != BreakerSettings().failure_threshold
    assert ApplicationState(breaker_settings=strict).settings() == strict
