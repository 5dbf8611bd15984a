"""The replica hook against the real simulated engine (in process, no Ray)."""

import asyncio

import pytest

from deployments.simulated import SimulatedEngine
from deployments.engine_stats import engine_autoscaling_stats
from serve_app.config.models import SimulatedSettings


@pytest.mark.asyncio
async def test_simulated_engine_waiting_requests_are_reported():
    engine = SimulatedEngine("qwen-72b", SimulatedSettings(ttft_ms=200, tpot_ms=1, output_tokens=3,
                                                           max_num_seqs=1))
    request = {"messages": [{"role": "user", "content": "hello"}]}
    tasks = [asyncio.create_task(engine.complete(request)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert engine_autoscaling_stats(engine.stats()) == {"engine_waiting": 2.0, "engine_running": 1.0}
    await asyncio.gather(*tasks)
    assert engine_autoscaling_stats(engine.stats()) == {"engine_waiting": 0.0, "engine_running": 0.0}
