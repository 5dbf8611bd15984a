"""The background loop every ingress replica runs its reports on (serve_app.periodic)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from serve_app.periodic import Periodic


@pytest.mark.asyncio
async def test_it_runs_the_step_every_interval_until_closed():
    runs: list[int] = []

    async def step():
        runs.append(1)

    loop = Periodic(step, 0.01, failing="x failed", recovered="x back")
    loop.start()
    loop.start()                     # idempotent: still one loop
    await asyncio.sleep(0.1)
    assert loop.running
    await loop.aclose()
    count = len(runs)
    assert 3 <= count <= 12 and not loop.running
    await asyncio.sleep(0.05)
    assert len(runs) == count        # closed means stopped


@pytest.mark.asyncio
async def test_a_failing_step_is_counted_logged_once_and_the_loop_goes_on(caplog):
    outcomes = [ConnectionError("down")] * 4 + [None] * 3
    runs: list[int] = []

    async def step():
        runs.append(1)
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome

    interval = {"s": 0.005}
    loop = Periodic(step, lambda: interval["s"], failing="board not reached", recovered="board reachable again")
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        loop.start()
        while len(runs) < 7:
            await asyncio.sleep(0.005)
        await loop.aclose()
    assert loop.failures == 4
    messages = [r.getMessage() for r in caplog.records if r.name == "ray.serve"]
    assert messages == ["board not reached (down)", "board reachable again"]


def test_start_needs_a_running_loop():
    async def step():
        pass

    with pytest.raises(RuntimeError):
        Periodic(step, 1.0, failing="", recovered="").start()
