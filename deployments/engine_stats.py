"""Replica side of the queue-depth signal: engine figures as Ray Serve custom metrics.

Ray Serve 2.60 calls a deployment's ``async def record_autoscaling_stats(self) ->
dict[str, float]`` on every replica each metrics interval and hands the values to the
policy (``ctx.raw_metrics`` / ``ctx.aggregated_metrics``). A model deployment implements it as

    async def record_autoscaling_stats(self) -> dict[str, float]:
        return engine_autoscaling_stats(self.engine.stats())

Both spellings of the engine's counts are understood: the simulated engine's
``{"waiting", "running"}`` and vLLM's metric names ``num_requests_waiting`` /
``num_requests_running``.
"""

from __future__ import annotations

from typing import Any, Mapping

# The custom metric names the queue-depth policy reads (serve_app.autoscaling.signals).
ENGINE_WAITING = "engine_waiting"
ENGINE_RUNNING = "engine_running"

_SOURCES: dict[str, tuple[str, ...]] = {
    ENGINE_WAITING: ("waiting", "num_requests_waiting"),
    ENGINE_RUNNING: ("running", "num_requests_running"),
}


def engine_autoscaling_stats(stats: Mapping[str, Any]) -> dict[str, float]:
    """Custom autoscaling metrics from an engine's stats dict.

    Only numbers are returned (Ray disables a replica's custom metrics for good on the first
    non-numeric value); a count the engine does not report is left out, and the policy then
    estimates it instead of reading a false zero.
    """
    out: dict[str, float] = {}
    for metric, keys in _SOURCES.items():
        for key in keys:
            value = stats.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[metric] = float(max(0, value))
                break
    return out
