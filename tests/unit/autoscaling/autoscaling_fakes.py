"""Hand-built stand-ins for Ray Serve's AutoscalingContext (same attribute names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Sample:
    """Shape of ray.serve._private.common.TimeStampedValue."""

    timestamp: float
    value: float


@dataclass
class FakeContext:
    current_num_replicas: int = 1
    target_num_replicas: int = 1
    total_num_requests: float = 0.0
    total_queued_requests: float = 0.0
    running_replicas: list[str] = field(default_factory=list)
    raw_metrics: Optional[dict[str, dict[str, list[Sample]]]] = None
    aggregated_metrics: Optional[dict[str, dict[str, float]]] = None
    policy_state: dict[str, Any] = field(default_factory=dict)
    current_time: Optional[float] = 1_000.0
    deployment_name: str = "model-test"
    config: Any = None

    def __post_init__(self) -> None:
        if not self.running_replicas:
            self.running_replicas = [f"r{i}" for i in range(self.current_num_replicas)]


def engine_reports(ctx: FakeContext, waiting: list[float], running: list[float],
                   at: Optional[float] = None) -> FakeContext:
    """Give every running replica of ``ctx`` one fresh engine sample."""
    t = ctx.current_time if at is None else at
    ctx.raw_metrics = {
        "engine_waiting": {r: [Sample(t - 5, 0.0), Sample(t, w)] for r, w in zip(ctx.running_replicas, waiting)},
        "engine_running": {r: [Sample(t, x)] for r, x in zip(ctx.running_replicas, running)},
    }
    return ctx
