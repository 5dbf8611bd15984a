"""Bounded priority admission: ordering under contention, back-pressure, wait estimate."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.config.resilience import RetryAfterSettings
from serve_app.errors import RateLimited
from serve_app.resilience.admission import PriorityAdmission

from resilience_fakes import FakeClock

pytestmark = pytest.mark.asyncio


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_capacity_bounds_in_flight_and_waiters_are_served_by_priority_then_fifo():
    adm = PriorityAdmission("k2", capacity=1, max_queue_size=10, clock=FakeClock())
    holder = await adm.acquire(priority=3)
    order: list[str] = []

    async def request(name: str, priority: int):
        slot = await adm.acquire(priority)
        order.append(name)
        slot.release()

    # Arrival order: long reasoning first, then code, then chat and vision.
    tasks = [asyncio.create_task(request(n, p)) for n, p in
             [("reasoning-1", 3), ("code-1", 2), ("reasoning-2", 3), ("chat-1", 0),
              ("vision-1", 0), ("code-2", 2)]]
    await _settle()
    assert adm.in_flight == 1 and adm.queue_length == 6
    holder.release()
    await asyncio.gather(*tasks)
    assert order == ["chat-1", "vision-1", "code-1", "code-2", "reasoning-1", "reasoning-2"]
    assert adm.in_flight == 0 and adm.queue_length == 0


async def test_full_queue_raises_rate_limited_with_retry_after():
    clock = FakeClock()
    adm = PriorityAdmission("k2", capacity=2, max_queue_size=2, service_time_hint_s=8.0,
                            retry_after=RetryAfterSettings(min_s=1, max_s=60), clock=clock)
    held = [await adm.acquire(0), await adm.acquire(0)]
    waiting = [asyncio.create_task(adm.acquire(0)) for _ in range(2)]
    await _settle()
    with pytest.raises(RateLimited) as info:
        await adm.acquire(0)
    err = info.value
    assert err.status == 429
    # 2 waiting / capacity 2 * 8 s service time = 8 s estimated wait.
    assert err.retry_after == pytest.approx(8.0)
    assert err.headers() == {"Retry-After": "8"}
    assert "max_queue_size 2" in err.message
    assert adm.rejected_total == 1
    for slot in held:
        slot.release()
    for slot in await asyncio.gather(*waiting):
        slot.release()


async def test_retry_after_is_clamped_to_configured_bounds():
    adm = PriorityAdmission("m", capacity=1, max_queue_size=0,
                            retry_after=RetryAfterSettings(min_s=2, max_s=5), clock=FakeClock())
    slot = await adm.acquire(0)
    with pytest.raises(RateLimited) as info:
        await adm.acquire(0)
    assert info.value.retry_after == 2   # nothing waiting: the floor
    slot.release()


async def test_estimated_wait_uses_oldest_waiter_and_service_time():
    clock = FakeClock()
    adm = PriorityAdmission("k2", capacity=2, max_queue_size=10, clock=clock)
    a, b = await adm.acquire(0), await adm.acquire(0)
    assert adm.estimated_wait_s() == 0.0
    clock.advance(4.0)
    a.release()   # observed service time 4 s
    c = await adm.acquire(0)
    waiters = [asyncio.create_task(adm.acquire(1)) for _ in range(3)]
    await _settle()
    # 3 waiting / 2 capacity * 4 s = 6 s, more than the oldest age (0 s).
    assert adm.estimated_wait_s() == pytest.approx(6.0)
    clock.advance(9.0)
    assert adm.estimated_wait_s() == pytest.approx(9.0)   # the line's own proof is larger
    for s in (b, c):
        s.release()
    await _settle()
    got = [w.result() for w in waiters if w.done()]
    assert len(got) == 2 and adm.queue_length == 1
    for s in got:
        s.release()
    (await waiters[2]).release()


async def test_cancelled_waiter_leaves_the_line_and_frees_nothing_twice():
    adm = PriorityAdmission("m", capacity=1, max_queue_size=5, clock=FakeClock())
    slot = await adm.acquire(0)
    gone = asyncio.create_task(adm.acquire(0))
    stays = asyncio.create_task(adm.acquire(1))
    await _settle()
    gone.cancel()
    await _settle()
    assert adm.queue_length == 1
    slot.release()
    second = await stays
    assert adm.in_flight == 1
    second.release()
    second.release()   # idempotent
    assert adm.in_flight == 0


async def test_max_wait_turns_a_long_wait_into_rate_limited():
    adm = PriorityAdmission("m", capacity=1, max_queue_size=5, max_wait_s=0.05, clock=FakeClock())
    slot = await adm.acquire(0)
    with pytest.raises(RateLimited):
        await adm.acquire(0)
    assert adm.queue_length == 0
    slot.release()
    assert adm.in_flight == 0


async def test_aging_lets_an_old_low_priority_request_overtake():
    clock = FakeClock()
    adm = PriorityAdmission("m", capacity=1, max_queue_size=10, aging_s=10.0, clock=clock)
    slot = await adm.acquire(0)
    order = []

    async def request(name, priority):
        s = await adm.acquire(priority)
        order.append(name)
        s.release()

    old = asyncio.create_task(request("old-reasoning", 3))
    await _settle()
    clock.advance(35.0)   # aged three classes: effective priority 0, and it came first
    new = asyncio.create_task(request("new-chat", 0))
    await _settle()
    slot.release()
    await asyncio.gather(old, new)
    assert order == ["old-reasoning", "new-chat"]


async def test_capacity_follows_running_model_replicas_shared_by_ingress_replicas():
    adm = PriorityAdmission("k2", capacity=8, max_queue_size=100, clock=FakeClock())
    held = [await adm.acquire(2) for _ in range(8)]
    order: list[str] = []

    async def request(name: str, priority: int):
        slot = await adm.acquire(priority)
        order.append(name)
        return slot

    tasks = [asyncio.create_task(request(n, p)) for n, p in
             [("code-1", 2), ("code-2", 2), ("chat-1", 0), ("reasoning-1", 3), ("chat-2", 0)]]
    await _settle()
    assert adm.queue_length == 5
    # A second model replica runs: 8 more slots at once, granted in priority order.
    adm.resize(model_replicas=2, ingress_replicas=1)
    await _settle()
    assert adm.capacity == 16 and adm.queue_length == 0 and adm.in_flight == 13
    assert order == ["chat-1", "chat-2", "code-1", "code-2", "reasoning-1"]
    # Two ingress replicas share the slots (rounded up); zero running replicas count as one.
    adm.resize(model_replicas=3, ingress_replicas=2)
    assert adm.capacity == 12
    adm.resize(model_replicas=0, ingress_replicas=0)
    assert adm.capacity == 8 and adm.snapshot()["model_replicas"] == 1
    # Shrinking starts nothing new until the in-flight count is under the new capacity.
    adm.resize(model_replicas=1, ingress_replicas=2)
    assert adm.capacity == 4
    late = asyncio.create_task(adm.acquire(0))
    await _settle()
    assert not late.done() and adm.in_flight == 13
    for slot in held + [t.result() for t in tasks][:4]:
        slot.release()
    await _settle()
    assert late.done() and adm.in_flight == 2     # the one still held, and the late request


async def test_default_capacity_is_the_engine_slots_unless_rays_policy_must_see_the_load():
    from serve_app.config.loader import ConfigError, horizon_args, parse_config, read_document
    from pathlib import Path

    args = dict(horizon_args(read_document(Path(__file__).resolve().parents[3] / "configs" / "sim.yaml")))
    args["resilience"] = {**args["resilience"], "admission": {}}
    cfg = parse_config(args)
    # qwen-72b: 20 simulated slots, max_ongoing_requests 40 → the line sends 20 at once.
    assert PriorityAdmission.from_config(cfg, "qwen-72b").capacity == 20
    models = [dict(m) for m in args["models"]]
    for m in models:
        if m["alias"] == "qwen-72b":
            m["scaling"] = {**m["scaling"], "policy": "ongoing_requests", "target_ongoing_requests": 20}
    ongoing = parse_config({**args, "models": models})
    assert PriorityAdmission.from_config(ongoing, "qwen-72b").capacity == 40
    # An explicit capacity Ray's policy could never see past is refused at load.
    with pytest.raises(ConfigError) as info:
        parse_config({**args, "models": models,
                      "resilience": {**args["resilience"], "admission": {"qwen-72b": {"capacity": 20}}}})
    assert info.value.paths == ["resilience.admission.qwen-72b.capacity"]
