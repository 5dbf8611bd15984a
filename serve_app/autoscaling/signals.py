"""The queue-depth signal a policy decides on, read from Ray Serve's ``AutoscalingContext``.

Four sources, from the outside in:

* requests waiting in the ingress's priority lines (``gateway_waiting``, a custom metric each
  model replica relays from its application's demand board, ``deployments.gateway_demand``):
  the admission line holds a model's backlog in the ingress so that priority decides who goes
  next, and without this figure the policy would never see it;
* requests queued at the deployment handles (``ctx.total_queued_requests``): every replica is
  already at ``max_ongoing_requests``;
* requests a replica accepted but its engine has not started decoding (``engine_waiting``,
  a custom metric each model replica reports: vLLM's ``num_requests_waiting``, or the
  simulated engine's ``waiting``);
* requests the engine is decoding (``engine_running``).

When replicas report no engine figures (a deployment without the hook, or a replica that has
not reported yet), what the engine runs is estimated from the replica's ongoing requests and
its decoding slots: anything above the slots is waiting. Ray aggregates the handle/ongoing
counts over ``look_back_period_s``; engine figures are taken from each replica's newest sample,
because waiting requests are the early signal and averaging them would slow the reaction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from deployments.engine_stats import ENGINE_RUNNING, ENGINE_WAITING
from deployments.gateway_demand import GATEWAY_WAITING



@dataclass(frozen=True)
class QueueSignal:
    """Requests in front of a deployment, summed over its replicas and handles."""

    queued_at_handles: float
    engine_waiting: float
    engine_running: float
    # True when engine_waiting/engine_running came from replicas' own reports.
    engine_reported: bool
    # Waiting in the ingress replicas' admission lines (every ingress replica, summed).
    gateway_waiting: float = 0.0

    @property
    def waiting(self) -> float:
        """Requests accepted by nobody's engine yet: the queue depth."""
        return self.gateway_waiting + self.queued_at_handles + self.engine_waiting

    @property
    def demand(self) -> float:
        """Every request the deployment holds: decoding plus waiting."""
        return self.engine_running + self.waiting


def _newest_value(series: Any, oldest_allowed: float) -> Optional[float]:
    """Newest sample of a Ray ``TimeSeries`` (list of TimeStampedValue), None if stale/empty."""
    if not series:
        return None
    newest = max(series, key=lambda point: point.timestamp)
    if newest.timestamp < oldest_allowed:
        return None
    return float(newest.value)


def _engine_metric(ctx: Any, name: str, max_age_s: float, now: float) -> Optional[float]:
    """Sum of ``name`` over running replicas; None unless every running replica reported it.

    A partial sum would read as a short queue just when a new replica has joined, so a
    missing report means "unknown", and the caller falls back to the estimate.
    """
    replicas = list(getattr(ctx, "running_replicas", None) or [])
    if not replicas:
        return None
    raw: Mapping[str, Mapping[Any, Any]] = ctx.raw_metrics or {}
    aggregated: Mapping[str, Mapping[Any, float]] = ctx.aggregated_metrics or {}
    total = 0.0
    for replica in replicas:
        value = _newest_value(raw.get(name, {}).get(replica), now - max_age_s)
        if value is None:
            value = aggregated.get(name, {}).get(replica)
        if value is None:
            return None
        total += max(0.0, float(value))
    return total


def _gateway_waiting(ctx: Any, max_age_s: float, now: float) -> float:
    """The gateway's backlog for this deployment: the highest fresh report among its replicas.

    Every replica relays the same board total, so the figures are not summed; the highest of
    the newest fresh samples is taken (a replica whose read lagged reports a slightly older
    total). No fresh report (no board, no Horizon ingress) means nothing waits there.
    """
    raw: Mapping[str, Mapping[Any, Any]] = ctx.raw_metrics or {}
    series = raw.get(GATEWAY_WAITING, {})
    values = [_newest_value(series.get(replica), now - max_age_s)
              for replica in (getattr(ctx, "running_replicas", None) or [])]
    return max((max(0.0, v) for v in values if v is not None), default=0.0)


def read_queue_signal(ctx: Any, replica_slots: int, metrics_max_age_s: float) -> QueueSignal:
    """The queue signal of one deployment from an ``AutoscalingContext`` (or a look-alike)."""
    now = ctx.current_time if ctx.current_time is not None else time.time()
    gateway = _gateway_waiting(ctx, metrics_max_age_s, now)
    total = max(0.0, float(ctx.total_num_requests or 0.0))
    queued = max(0.0, float(ctx.total_queued_requests or 0.0))
    # Ray's two windows are reduced independently; ongoing can come out slightly negative.
    ongoing_at_replicas = max(0.0, total - queued)

    waiting = _engine_metric(ctx, ENGINE_WAITING, metrics_max_age_s, now)
    running = _engine_metric(ctx, ENGINE_RUNNING, metrics_max_age_s, now)
    if waiting is not None:
        if running is None:
            running = max(0.0, ongoing_at_replicas - waiting)
        return QueueSignal(queued, waiting, running, engine_reported=True, gateway_waiting=gateway)

    capacity = replica_slots * ctx.current_num_replicas
    running = min(ongoing_at_replicas, float(capacity))
    return QueueSignal(queued, ongoing_at_replicas - running, running, engine_reported=False,
                       gateway_waiting=gateway)
