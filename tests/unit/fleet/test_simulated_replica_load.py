"""A simulated replica can take time to start, as a real engine loading its weights."""

from __future__ import annotations

import time

import pytest

from deployments.simulated import SimulatedLLMDeployment

pytestmark = pytest.mark.asyncio


async def test_the_first_configuration_waits_load_s_and_later_ones_do_not():
    replica = SimulatedLLMDeployment.func_or_class("qwen-72b", latency_scale=0.0)
    started = time.perf_counter()
    await replica.reconfigure({"load_s": 0.3})
    assert time.perf_counter() - started >= 0.3
    started = time.perf_counter()
    await replica.reconfigure({"load_s": 0.3, "ttft_ms": 5})   # a lightweight update: no reload
    assert time.perf_counter() - started < 0.1
    answer = await replica.chat({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert answer["choices"][0]["message"]["content"]


async def test_a_replica_deployed_without_user_config_serves_the_default_profile():
    replica = SimulatedLLMDeployment.func_or_class("coder", latency_scale=0.0)
    answer = await replica.chat({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert answer["model"] == "coder"
