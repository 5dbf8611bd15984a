"""RayBreakerStore without Ray: the registry actor body behind a fake handle."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.config.resilience import BreakerSettings
from serve_app.resilience.breaker import CircuitBreaker
from serve_app.resilience.breaker_ray import BreakerRegistry, RayBreakerStore
from tests.fakes.ray_remote import FakeActorHandle, FakeRayRemote

from resilience_fakes import FakeClock

SETTINGS = BreakerSettings(failure_threshold=5, window_s=30, probe_interval_s=10, sync_interval_s=0.01)


def replica(handle, clock):
    store = RayBreakerStore(handle, SETTINGS, clock=clock)
    return store, CircuitBreaker("k2", store)


@pytest.mark.asyncio
async def test_failures_seen_by_two_replicas_open_the_shared_breaker():
    clock = FakeClock()
    handle = FakeActorHandle(BreakerRegistry())
    store_a, breaker_a = replica(handle, clock)
    store_b, breaker_b = replica(handle, clock)
    for _ in range(3):
        breaker_a.try_acquire().failure()
    for _ in range(2):
        breaker_b.try_acquire().failure()
    # Neither replica alone has seen 5 failures.
    assert breaker_a.state().state == "closed" and breaker_b.state().state == "closed"
    await store_a.sync_once()
    await store_b.sync_once()   # b's 2 failures land after a's 3: the shared breaker opens
    await store_a.sync_once()   # a picks up the shared state
    assert breaker_a.state().state == "open"
    assert breaker_b.state().state == "open"


@pytest.mark.asyncio
async def test_hot_path_makes_no_remote_call_and_background_sync_batches():
    clock = FakeClock()
    handle = FakeActorHandle(BreakerRegistry())
    store, breaker = replica(handle, clock)
    for _ in range(50):
        breaker.allows()
        breaker.try_acquire().success()
    assert handle.remote_calls == 0   # outside a sync, nothing went remote
    store.start()
    await asyncio.sleep(0.05)
    await store.aclose()
    # configure once, then one sync per interval carrying the whole batch — not 50 calls.
    assert 2 <= handle.remote_calls < 15


@pytest.mark.asyncio
async def test_unreachable_registry_keeps_local_state_and_delivers_later():
    clock = FakeClock()
    registry = BreakerRegistry()
    handle = FakeActorHandle(registry)
    store, breaker = replica(handle, clock)
    handle.down = True
    for _ in range(5):
        breaker.try_acquire().failure()
    with pytest.raises(ConnectionError):
        await store.sync_once()
    assert breaker.state().state == "open"   # the replica's own view still protects it
    handle.down = False
    await store.sync_once()
    assert registry.states()["k2"]["state"] == "open"


@pytest.mark.asyncio
async def test_outcomes_recorded_during_a_sync_are_not_forgotten():
    clock = FakeClock()
    registry = BreakerRegistry()
    handle = FakeActorHandle(registry)
    store, breaker = replica(handle, clock)
    for _ in range(4):
        breaker.try_acquire().failure()
    real_sync = handle.sync

    class _Slow:
        def remote(self, events):
            async def call():
                breaker.try_acquire().failure()   # recorded while the reply is in flight
                return await real_sync.remote(events)
            return call()

    handle.sync = _Slow()
    await store.sync_once()
    assert breaker.state().state == "open"     # 4 shared + 1 replayed locally
    handle.sync = real_sync
    await store.sync_once()
    assert registry.states()["k2"]["state"] == "open"


@pytest.mark.asyncio
async def test_two_applications_neither_share_state_nor_overwrite_settings(monkeypatch):
    import ray

    fake = FakeRayRemote(wrap=FakeActorHandle)
    monkeypatch.setattr(ray, "remote", fake.remote)
    strict = BreakerSettings(failure_threshold=2, sync_interval_s=0.01)
    lenient = BreakerSettings(failure_threshold=50, sync_interval_s=0.01)
    sim = RayBreakerStore.connect(strict, app_name="sim")
    local = RayBreakerStore.connect(lenient, app_name="local")
    sim_again = RayBreakerStore.connect(strict, app_name="sim")   # a second replica of /sim
    assert sorted(fake.actors) == ["horizon-breakers:local", "horizon-breakers:sim"]
    opts = fake.options["BreakerRegistry"]
    assert opts["get_if_exists"] and opts["namespace"] == "horizon"

    # The same alias in both applications: /sim's failures open only /sim's breaker.
    for _ in range(2):
        CircuitBreaker("k2", sim).try_acquire().failure()
    for store in (sim, local, sim_again):
        await store.sync_once()
    assert CircuitBreaker("k2", sim_again).state().state == "open"
    assert CircuitBreaker("k2", local).state().state == "closed"
    assert "k2" not in fake.actors["horizon-breakers:local"].states()
    # Each registry keeps its own application's settings (a redeploy of one touches only it).
    assert fake.actors["horizon-breakers:sim"].settings()["failure_threshold"] == 2
    assert fake.actors["horizon-breakers:local"].settings()["failure_threshold"] == 50
