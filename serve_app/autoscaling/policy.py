"""Queue-depth autoscaling policy for model deployments (a Ray Serve custom policy).

LLM replicas saturate on decoding slots, not on request count: a replica running its full
batch with nobody waiting is healthy, one with a queue is not. So the policy sizes each
deployment to keep the queue (requests waiting at handles plus requests waiting inside the
engines) at about ``target_queue_per_replica`` per replica once every slot is busy:

    replicas = ceil(demand / (slots_per_replica + target_queue_per_replica))

``slots_per_replica`` is the engine's decoding capacity; while a queue exists and engines
report what they run, the observed running-per-replica replaces it (a KV-cache-bound engine
decodes fewer sequences than its ``max_num_seqs``). The result is then

* raised to ``min_replicas`` and to any open schedule window's minimum — immediately, because
  a window exists to have the model warm before its traffic;
* capped at ``max_replicas``;
* applied only after the wish persisted: ``upscale_delay_s`` before adding replicas,
  ``downscale_delay_s`` before removing them (to the highest count wished for during that
  delay, so one quiet sample cannot undershoot), ``scale_to_zero_delay_s`` before releasing
  the last replica of a cold model.

The delay timers live in ``policy_state`` (Ray hands it back on the next tick). Ray Serve
wraps every custom policy with its own delay logic driven by the deployment's
``upscale_delay_s``/``downscale_delay_s``; :mod:`serve_app.autoscaling.options` sets those to 0
for this policy so the delays are counted once, here. Ray's wrapper also keeps its cold-start
path: a deployment at zero replicas with requests waiting gets one at once.

Ray Serve 2.60 passes ``policy_kwargs`` only to a policy *class*, so the import path Serve is
given is :class:`QueueDepthPolicy`; the decision itself is the pure function
:func:`queue_depth_policy`.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from serve_app.config.models import ScheduleWindow

from .schedule import scheduled_minimum
from .signals import QueueSignal, read_queue_signal

logger = logging.getLogger("ray.serve")

# policy_state keys (namespaced: Ray keeps its own keys in the same dict).
UP_SINCE = "queue_depth.up_since"
DOWN_SINCE = "queue_depth.down_since"
DOWN_PEAK = "queue_depth.down_peak"
LAST_SIGNAL = "queue_depth.last_signal"

# Float noise in demand / capacity must not add a replica (10.000001 / 5 is 2, not 3).
_CEIL_EPS = 1e-6


@dataclass(frozen=True)
class QueueDepthParams:
    """Per-deployment knobs (``policy_kwargs``; built by options.autoscaling_config)."""

    target_queue_per_replica: float
    replica_slots: int
    min_replicas: int
    max_replicas: int
    upscale_delay_s: float
    downscale_delay_s: float
    scale_to_zero_delay_s: float
    # Engine reports older than this are ignored (the replica stopped reporting).
    metrics_max_age_s: float
    schedule: tuple[ScheduleWindow, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.target_queue_per_replica <= 0:
            raise ValueError("target_queue_per_replica must be > 0")
        if self.replica_slots < 1:
            raise ValueError("replica_slots must be >= 1")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")
        if min(self.upscale_delay_s, self.downscale_delay_s, self.scale_to_zero_delay_s) < 0:
            raise ValueError("delays must be >= 0")

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> "QueueDepthParams":
        values = dict(kwargs)
        values["schedule"] = tuple(ScheduleWindow.model_validate(w) for w in values.get("schedule", ()))
        return cls(**values)

    def to_kwargs(self) -> dict[str, Any]:
        """JSON-serialisable form (Ray requires it for ``policy_kwargs``)."""
        return {
            "target_queue_per_replica": self.target_queue_per_replica,
            "replica_slots": self.replica_slots,
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "upscale_delay_s": self.upscale_delay_s,
            "downscale_delay_s": self.downscale_delay_s,
            "scale_to_zero_delay_s": self.scale_to_zero_delay_s,
            "metrics_max_age_s": self.metrics_max_age_s,
            "schedule": [w.model_dump(mode="json") for w in self.schedule],
        }


def replica_floor(params: QueueDepthParams, now: float) -> int:
    """min_replicas raised by the schedule window open at ``now`` (epoch seconds), capped."""
    scheduled = scheduled_minimum(params.schedule, dt.datetime.fromtimestamp(now, dt.timezone.utc))
    return min(params.max_replicas, max(params.min_replicas, scheduled))


def replicas_for_load(signal: QueueSignal, params: QueueDepthParams, current_replicas: int) -> int:
    """Replicas that hold ``signal``'s demand with at most the target queue each (uncapped)."""
    if signal.demand <= 0:
        return 0
    slots = float(params.replica_slots)
    if signal.engine_waiting > 0 and signal.engine_reported and current_replicas > 0:
        # The engines hold requests they cannot decode yet: they are full, and what they
        # actually decode is the true capacity (fewer than max_num_seqs when the KV cache
        # binds). Requests queued at the handles or in the gateway alone say nothing about the
        # engines: Serve's router holds requests for a moment while it picks a replica, and a
        # fast engine sampled at an instant runs none, so reading those as "full" scaled an
        # idle zero-latency model to max_replicas under a steady 64 requests in flight.
        slots = min(slots, max(1.0, signal.engine_running / current_replicas))
    return max(1, math.ceil(signal.demand / (slots + params.target_queue_per_replica) - _CEIL_EPS))


def desired_replicas(signal: QueueSignal, params: QueueDepthParams, current_replicas: int,
                     floor: int) -> int:
    """Load-based replicas, no lower than ``floor``, no higher than max_replicas."""
    return min(params.max_replicas, max(floor, replicas_for_load(signal, params, current_replicas)))


def apply_delays(desired: int, floor: int, target: int, now: float, state: dict[str, Any],
                 params: QueueDepthParams) -> tuple[int, dict[str, Any]]:
    """Move the current ``target`` towards ``desired`` only once the wish has lasted its delay.

    Returns the new target and the updated state (a new dict).
    """
    state = dict(state)
    # A raised floor (schedule window opened, or min_replicas raised) applies at once.
    immediate = max(target, floor)
    if desired > immediate:
        state.pop(DOWN_SINCE, None)
        state.pop(DOWN_PEAK, None)
        since = state.setdefault(UP_SINCE, now)
        if now - since >= params.upscale_delay_s:
            state.pop(UP_SINCE, None)
            return desired, state
        return immediate, state
    if desired < target:
        state.pop(UP_SINCE, None)
        since = state.setdefault(DOWN_SINCE, now)
        peak = max(int(state.get(DOWN_PEAK, desired)), desired)
        state[DOWN_PEAK] = peak
        delay = params.scale_to_zero_delay_s if peak == 0 else params.downscale_delay_s
        if now - since >= delay:
            if peak == 0 and target > 1:
                # Serve only goes to zero from one replica; keep the timer so the 1 -> 0
                # step follows on the next tick instead of waiting a second delay.
                return 1, state
            state.pop(DOWN_SINCE, None)
            state.pop(DOWN_PEAK, None)
            return peak, state
        return target, state
    for key in (UP_SINCE, DOWN_SINCE, DOWN_PEAK):
        state.pop(key, None)
    return immediate, state


def queue_depth_policy(ctx: Any, params: QueueDepthParams) -> tuple[int, dict[str, Any]]:
    """One autoscaling decision: ``(target replicas, policy_state)`` (Ray's policy contract)."""
    now = ctx.current_time if ctx.current_time is not None else time.time()
    signal = read_queue_signal(ctx, params.replica_slots, params.metrics_max_age_s)
    floor = replica_floor(params, now)
    desired = desired_replicas(signal, params, ctx.current_num_replicas, floor)
    decision, state = apply_delays(desired, floor, ctx.target_num_replicas, now,
                                   dict(ctx.policy_state or {}), params)
    state[LAST_SIGNAL] = {"waiting": signal.waiting, "gateway_waiting": signal.gateway_waiting,
                          "demand": signal.demand,
                          "engine_reported": signal.engine_reported, "desired": desired}
    if decision != ctx.target_num_replicas:
        logger.info("queue_depth %s: %d -> %d replicas (waiting %.1f of which %.1f at the gateway, "
                    "demand %.1f, floor %d, engine reported %s)", getattr(ctx, "deployment_name", "?"),
                    ctx.target_num_replicas, decision, signal.waiting, signal.gateway_waiting,
                    signal.demand, floor, signal.engine_reported)
    return decision, state


class QueueDepthPolicy:
    """The object Ray Serve instantiates once per deployment with ``policy_kwargs``."""

    def __init__(self, **policy_kwargs: Any):
        self.params = QueueDepthParams.from_kwargs(policy_kwargs)

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        return queue_depth_policy(ctx, self.params)


POLICY_IMPORT_PATH = f"{__name__}:{QueueDepthPolicy.__name__}"

