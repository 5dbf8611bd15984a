"""Health-aware degradation: an exact share of traffic leaves a model whose line is too long."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.resilience import ResilientFleet
from serve_app.resilience.degrade import Degrader
from serve_app.config.resilience import DegradeRule

from resilience_fakes import FakeClock, FakeModel, make_config, make_fleet


RULE = {"model": "k2", "max_queue_wait_s": 10, "target": "qwen-72b", "share": 0.5,
        "task_types": ["reasoning", "unknown"]}


async def _k2_with_a_long_line(wait_s: float):
    """k2 busy (capacity 1) with one request waiting ``wait_s`` on the fake clock."""
    fake = make_fleet(FakeModel("k2", delay_s=0.5))
    clock = FakeClock()
    rf = ResilientFleet(fake, make_config(resilience={
        "degrade": [RULE], "admission": {"k2": {"capacity": 1, "max_queue_size": 100}}}), clock=clock)
    busy = [asyncio.create_task(rf.complete("unknown", "k2", {}, fallback_ok=False)) for _ in range(2)]
    await asyncio.sleep(0.01)
    clock.advance(wait_s)
    return rf, fake, busy


@pytest.mark.asyncio
async def test_over_the_bound_exactly_the_share_is_degraded_and_recorded():
    rf, fake, busy = await _k2_with_a_long_line(12.0)
    assert rf.health()["k2"]["estimated_queue_wait_s"] == pytest.approx(12.0)
    degraded = 0
    tasks = []
    for _ in range(10):
        tasks.append(asyncio.create_task(rf.complete("reasoning", "k2", {})))
        await asyncio.sleep(0)
    results = await asyncio.gather(*tasks, *busy)
    for response, hops in results[:10]:
        if hops[0].outcome == "degraded":
            degraded += 1
            assert hops[0].model == "k2" and "10 s" in hops[0].error
            assert [h.model for h in hops] == ["k2", "qwen-72b"] and response["model"] == "qwen-72b"
    assert degraded == 5
    assert fake.calls()["qwen-72b"] == 5 and fake.calls()["k2"] == 2 + 5


@pytest.mark.asyncio
async def test_under_the_bound_nothing_is_degraded():
    rf, fake, busy = await _k2_with_a_long_line(9.0)
    tasks = [asyncio.create_task(rf.complete("reasoning", "k2", {})) for _ in range(4)]
    results = await asyncio.gather(*tasks, *busy)
    assert all(h[0].outcome != "degraded" for _, h in results)
    assert fake.calls()["qwen-72b"] == 0


@pytest.mark.asyncio
async def test_other_task_types_and_fallback_off_are_not_degraded():
    rf, fake, busy = await _k2_with_a_long_line(30.0)
    tasks = [asyncio.create_task(rf.complete("code", "k2", {})),
             asyncio.create_task(rf.complete("reasoning", "k2", {}, fallback_ok=False)),
             asyncio.create_task(rf.complete("reasoning", "k2", {}, fallback_ok=False))]
    await asyncio.gather(*tasks, *busy)
    assert fake.calls()["qwen-72b"] == 0


def test_share_counting_is_exact():
    degrader = Degrader([DegradeRule(model="k2", max_queue_wait_s=10, target="qwen-72b", share=0.3)])
    picks = [degrader.choose("k2", "reasoning", lambda a: 11.0, lambda a: True) is not None
             for _ in range(100)]
    assert sum(picks) == 30
    assert sum(picks[:10]) == 3


def test_no_degradation_onto_an_unavailable_target():
    degrader = Degrader([DegradeRule(model="k2", max_queue_wait_s=10, target="qwen-72b", share=1.0)])
    assert degrader.choose("k2", None, lambda a: 60.0, lambda a: False) is None
    assert degrader.choose("k2", None, lambda a: 60.0, lambda a: True) is not None
