"""Ray Serve scaling options of a model deployment, from its ``scaling`` section.

Every autoscaling target is set explicitly: ``ray.serve.llm`` fills an unset
``target_ongoing_requests`` with an effectively infinite default, which would leave Ray's
default policy silently never scaling up. The dicts returned here are plain
``serve.deployment(...).options(**...)`` keyword arguments (for a vLLM model they go into
``LLMConfig(deployment_config=...)``).
"""

from __future__ import annotations

from typing import Any, Optional

from serve_app.config.models import ModelSettings, ScalingSettings

from ..fleet.backends import backend
from .policy import POLICY_IMPORT_PATH, QueueDepthParams


def replica_slots(model: ModelSettings) -> int:
    """Sequences one replica of ``model`` decodes at once.

    ``scaling.replica_slots`` when set; otherwise the engine's ``max_num_seqs`` (simulated or
    vLLM), bounded by ``max_ongoing_requests`` since Serve never hands a replica more; an
    engine with no stated limit is taken to decode all it is handed.
    """
    s = model.scaling
    if s.replica_slots is not None:
        return s.replica_slots
    engine_slots = backend(model.backend).engine_slots(model)
    if engine_slots is None:
        return s.max_ongoing_requests
    return max(1, min(engine_slots, s.max_ongoing_requests))


def metrics_max_age_s(scaling: ScalingSettings) -> float:
    """Age beyond which a replica's engine report is stale.

    Replicas push every ``metrics_interval_s``; a report two pushes late means the replica
    stopped reporting (stuck or gone), and the policy must not keep reading its last queue.
    """
    return 3 * scaling.metrics_interval_s


def queue_depth_params(model: ModelSettings) -> QueueDepthParams:
    s = model.scaling
    return QueueDepthParams(
        target_queue_per_replica=s.target_queue_per_replica,
        replica_slots=replica_slots(model),
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        upscale_delay_s=s.upscale_delay_s,
        downscale_delay_s=s.downscale_delay_s,
        scale_to_zero_delay_s=(s.scale_to_zero_delay_s if s.scale_to_zero_delay_s is not None
                               else s.downscale_delay_s),
        metrics_max_age_s=metrics_max_age_s(s),
        schedule=tuple(s.schedule),
    )


def autoscaling_config(model: ModelSettings) -> Optional[dict[str, Any]]:
    """The Serve ``autoscaling_config`` of ``model``; None when its replica count is fixed."""
    s = model.scaling
    if not s.autoscaling:
        return None
    cfg: dict[str, Any] = {
        "min_replicas": s.min_replicas,
        "max_replicas": s.max_replicas,
        # Used by Ray's default policy and its metrics; set even for queue_depth so nothing
        # downstream (ray.serve.llm's defaults) can substitute "infinite".
        "target_ongoing_requests": s.target_ongoing_requests,
        "metrics_interval_s": s.metrics_interval_s,
        "look_back_period_s": s.look_back_period_s,
    }
    if s.initial_replicas is not None:
        cfg["initial_replicas"] = s.initial_replicas
    if s.policy == "ongoing_requests":
        cfg["upscale_delay_s"] = s.upscale_delay_s
        cfg["downscale_delay_s"] = s.downscale_delay_s
        if s.scale_to_zero_delay_s is not None:
            cfg["downscale_to_zero_delay_s"] = s.scale_to_zero_delay_s
        return cfg
    # queue_depth: the policy counts its own delays (policy_state); Ray's wrapper around a
    # custom policy would otherwise delay the already-delayed decision a second time.
    cfg["upscale_delay_s"] = 0.0
    cfg["downscale_delay_s"] = 0.0
    cfg["downscale_to_zero_delay_s"] = 0.0
    cfg["policy"] = {"policy_function": POLICY_IMPORT_PATH,
                     "policy_kwargs": queue_depth_params(model).to_kwargs()}
    return cfg


def scaling_options(model: ModelSettings, line_per_replica: Optional[int] = None) -> dict[str, Any]:
    """Replica count or autoscaling, plus Serve admission bounds, for ``.options(**...)``.

    ``line_per_replica``: what the gateway's admission line sends one replica at once
    (:func:`serve_app.resilience.admission.line_per_replica`). Serve is then told
    ``max_ongoing_requests`` no higher than that. The line caps the *sum* over the replicas,
    but Serve's router picks the less busy of two replicas drawn at random, so with a higher
    limit it stacks a request on a replica whose slots are all busy while another replica's
    slot idles: the request waits a whole engine turn in that replica's FIFO queue, out of
    priority order, and the deployment serves less than its slots. With the limit at the line's
    figure the router only hands a request to a replica with a free slot.
    """
    s = model.scaling
    max_ongoing = s.max_ongoing_requests if line_per_replica is None else min(s.max_ongoing_requests,
                                                                              line_per_replica)
    options: dict[str, Any] = {
        "max_ongoing_requests": max_ongoing,
        "max_queued_requests": s.max_queued_requests,
        "max_surge_percent": s.max_surge_percent,
    }
    autoscaling = autoscaling_config(model)
    if autoscaling is None:
        options["num_replicas"] = s.min_replicas
    else:
        options["autoscaling_config"] = autoscaling
    return options
