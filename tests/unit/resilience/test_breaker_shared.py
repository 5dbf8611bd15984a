"""RayBreakerStore without Ray: the registry actor body behind a fake handle."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.app_state import connect_application_state
from serve_app.config.resilience import BreakerSettings
from serve_app.resilience.breaker import CircuitBreaker
from serve_app.resilience.breaker_ray import BreakerRegistry, RayBreakerStore
from tests.fakes.ray_remote import FakeActorHandle, FakeRayRemote

from resilience_fakes import FakeClock

SETTINGS = BreakerSettings(failure_threshold=5, window_s=30, probe_interval_s=10, sync_interval_s=0.01)


def replica(handle, clock, settings=SETTINGS):
    store = RayBreakerStore(handle, settings, clock=clock)
    return store, CircuitBreaker("k2", store)


class CountingRegistry(BreakerRegistry):
    """The registry, counting the calls it answers."""

    def __init__(self):
        super().__init__()
        self.calls = {"sync": 0, "watch": 0}
        self.pushed = 0

    def sync(self, events):
        self.calls["sync"] += 1
        self.pushed += len(events)
        return super().sync(events)

    async def watch(self, epoch, version, timeout_s):
        self.calls["watch"] += 1
        return await super().watch(epoch, version, timeout_s)


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
    registry = CountingRegistry()
    handle = FakeActorHandle(registry)
    store, breaker = replica(handle, clock)
    for _ in range(50):
        breaker.allows()
        breaker.try_acquire().success()
    assert handle.remote_calls == 0   # outside a sync, nothing went remote
    store.start()
    await asyncio.sleep(0.05)
    await store.aclose()
    # One push carrying the whole batch, not 50 calls; with nothing queued after it, no more.
    assert registry.calls["sync"] == 1 and registry.pushed == 50


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
    sim = RayBreakerStore(connect_application_state("sim"), strict)
    local = RayBreakerStore(connect_application_state("local"), lenient)
    sim_again = RayBreakerStore(connect_application_state("sim"), strict)   # a second replica of /sim
    assert sorted(fake.actors) == ["horizon-state.v2:local", "horizon-state.v2:sim"]
    opts = fake.options["ApplicationState"]
    assert opts["get_if_exists"] and opts["namespace"] == "horizon"

    # The same alias in both applications: /sim's failures open only /sim's breaker.
    for _ in range(2):
        CircuitBreaker("k2", sim).try_acquire().failure()
    for store in (sim, local, sim_again):
        await store.sync_once()
    assert CircuitBreaker("k2", sim_again).state().state == "open"
    assert CircuitBreaker("k2", local).state().state == "closed"
    assert "k2" not in fake.actors["horizon-state.v2:local"].states()
    # Each registry keeps its own application's settings (a redeploy of one touches only it).
    assert fake.actors["horizon-state.v2:sim"].settings()["failure_threshold"] == 2
    assert fake.actors["horizon-state.v2:local"].settings()["failure_threshold"] == 50


@pytest.mark.asyncio
async def test_an_idle_replica_watches_instead_of_polling():
    registry = CountingRegistry()
    settings = BreakerSettings(sync_interval_s=0.01, watch_timeout_s=5.0)
    store, _ = replica(FakeActorHandle(registry), FakeClock(), settings)
    store.start()
    await asyncio.sleep(0.3)   # 30 intervals
    await store.aclose()
    # The first push (configure and sync), then nothing to push; the watch answered at once
    # (no states yet), then waited: at most one more.
    assert registry.calls["sync"] == 1
    assert registry.calls["watch"] <= 3


@pytest.mark.asyncio
async def test_a_breaker_opened_by_another_replica_reaches_a_watching_one_at_once():
    registry = BreakerRegistry()
    handle = FakeActorHandle(registry)
    # A long interval: a poll every interval would not see the change within this test.
    settings = BreakerSettings(failure_threshold=5, sync_interval_s=0.5, watch_timeout_s=30.0)
    store_a, breaker_a = replica(handle, FakeClock(), settings)
    store_b, breaker_b = replica(handle, FakeClock(), settings)
    store_a.start()
    await asyncio.sleep(0.6)   # A has pushed, and waits in its watch
    for _ in range(5):
        breaker_b.try_acquire().failure()
    await store_b.sync_once()
    await asyncio.sleep(0.05)  # a tenth of the interval
    assert breaker_a.state().state == "open"
    await store_a.aclose()


@pytest.mark.asyncio
async def test_the_watch_answers_a_change_at_once_and_nothing_new_after_its_timeout():
    registry = BreakerRegistry()
    first = registry.reply()
    started = asyncio.get_running_loop().time()
    same = await registry.watch(first["epoch"], first["version"], 0.05)
    assert asyncio.get_running_loop().time() - started >= 0.05
    assert same == first
    waiting = asyncio.ensure_future(registry.watch(first["epoch"], first["version"], 30.0))
    await asyncio.sleep(0)
    registry.sync([("k2", "failure", 1.0)])
    changed = await asyncio.wait_for(waiting, 1.0)
    assert changed["version"] == first["version"] + 1
    assert changed["states"]["k2"]["consecutive_failures"] == 1
    # A success on a closed breaker with no failures changes nothing: no new version.
    registry.sync([("coder", "success", 2.0)])
    version = registry.reply()["version"]
    registry.sync([("coder", "success", 3.0)])
    assert registry.reply()["version"] == version


@pytest.mark.asyncio
async def test_a_restarted_registry_is_adopted_though_its_version_is_lower():
    clock = FakeClock()
    handle = FakeActorHandle(BreakerRegistry())
    store, breaker = replica(handle, clock)
    for _ in range(3):
        breaker.try_acquire().failure()
        await store.sync_once()
    restarted = BreakerRegistry()   # a new epoch, version 0, none of the old states
    restarted.sync([("k2", "failure", clock())] * 5)
    handle._body = restarted
    await store.watch_once()
    assert breaker.state().state == "open"


@pytest.mark.asyncio
async def test_a_watch_answered_during_a_push_does_not_drop_the_outcomes_in_flight():
    registry = BreakerRegistry()
    handle = FakeActorHandle(registry)
    store_a, breaker_a = replica(handle, FakeClock())
    store_b, breaker_b = replica(handle, FakeClock())
    await store_a.sync_once()
    real_sync = handle.sync
    release = asyncio.Event()

    class _Held:
        def remote(self, events):
            async def call():
                await release.wait()
                return await real_sync.remote(events)
            return call()

    watching = asyncio.ensure_future(store_a.watch_once())
    await asyncio.sleep(0)
    for _ in range(5):
        breaker_a.try_acquire().failure()     # A's breaker opens locally
    handle.sync = _Held()
    pushing = asyncio.ensure_future(store_a.sync_once())   # A's 5 failures, held in flight
    await asyncio.sleep(0)
    handle.sync = real_sync
    CircuitBreaker("coder", store_b).try_acquire().failure()
    await store_b.sync_once()                 # another change: A's watch is answered without A's failures
    await asyncio.wait_for(watching, 1.0)
    assert breaker_a.state().state == "open"  # the reply in between did not reset the mirror
    release.set()
    await pushing
    assert breaker_a.state().state == "open"
    assert registry.states()["k2"]["state"] == "open"


class Incarnations:
    """The state actor as ``connect`` gets it: each call hands out the current incarnation."""

    def __init__(self):
        self.handles = [FakeActorHandle(CountingRegistry())]

    def end_for_good(self) -> None:
        """The actor ends without a restart; the next lookup makes a new one (get_if_exists)."""
        self.handles[-1].down = True
        self.handles.append(FakeActorHandle(CountingRegistry()))

    def connect(self):
        return self.handles[-1]


@pytest.mark.asyncio
async def test_a_store_finds_the_actor_again_after_it_ended_for_good():
    clock = FakeClock()
    actor = Incarnations()
    store = RayBreakerStore(actor.connect(), SETTINGS, clock=clock, connect=actor.connect)
    breaker = CircuitBreaker("k2", store)
    breaker.try_acquire().failure()
    await store.sync_once()
    first = actor.handles[0]._body
    assert first.pushed == 1
    actor.end_for_good()
    for _ in range(2):
        breaker.try_acquire().failure()
    with pytest.raises(ConnectionError):
        await store.sync_once()            # the dead handle: this push fails...
    await store.sync_once()                # ...and the next one goes to the new incarnation
    second = actor.handles[1]._body
    assert second.pushed == 2              # the two outcomes the failed push kept
    assert second.states()["k2"]["consecutive_failures"] == 2
    assert second.settings()["failure_threshold"] == SETTINGS.failure_threshold   # configured anew
    # The watch adopts the new incarnation's states (a new epoch).
    await store.watch_once()
    assert store.get("k2").consecutive_failures == 2


@pytest.mark.asyncio
async def test_a_failed_watch_also_looks_the_actor_up_again():
    actor = Incarnations()
    store = RayBreakerStore(actor.connect(), SETTINGS, clock=FakeClock(), connect=actor.connect)
    actor.end_for_good()
    with pytest.raises(ConnectionError):
        await store.watch_once()
    actor.handles[1]._body.sync([("k2", "failure", 0.0)])
    await store.watch_once()
    assert store.get("k2").consecutive_failures == 1


@pytest.mark.asyncio
async def test_without_connect_a_store_keeps_its_handle():
    actor = Incarnations()
    store = RayBreakerStore(actor.connect(), SETTINGS, clock=FakeClock())
    actor.end_for_good()
    for _ in range(2):
        with pytest.raises(ConnectionError):
            await store.sync_once()
    assert actor.handles[1].remote_calls == 0
