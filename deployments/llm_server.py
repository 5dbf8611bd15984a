"""The vLLM model deployment class: ``ray.serve.llm``'s ``LLMServer`` plus the engine's queue.

Ray Serve calls ``record_autoscaling_stats`` on each replica every metrics interval and hands
the values to :class:`serve_app.autoscaling.policy.QueueDepthPolicy`; the counts come from
vLLM's scheduler through :mod:`deployments.vllm_stats`. Set as ``LLMConfig.server_cls`` of every
vLLM model deployment (``deployments/llm.py``).
"""

from __future__ import annotations

from ray.serve.llm import LLMServer

from serve_app.autoscaling.replica_stats import engine_autoscaling_stats

from .vllm_stats import latest_engine_stats


class HorizonLLMServer(LLMServer):
    """``LLMServer`` reporting its engine's waiting/running requests to the autoscaler."""

    async def record_autoscaling_stats(self) -> dict[str, float]:
        return engine_autoscaling_stats(latest_engine_stats())
