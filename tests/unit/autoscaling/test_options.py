import json

import pytest
from ray import serve
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from serve_app.autoscaling.options import autoscaling_config, replica_slots, scaling_options
from serve_app.autoscaling.policy import QueueDepthParams
from serve_app.config.loader import ConfigError, load_config, parse_config, read_document, horizon_args
from serve_app.config.models import ModelSettings


def model(**scaling) -> ModelSettings:
    return ModelSettings.model_validate({
        "alias": "qwen-72b", "role": "chat", "backend": "simulated", "engine": {"model": "sim"},
        "simulated": {"max_num_seqs": 6},
        "scaling": {"min_replicas": 1, "max_replicas": 3, "max_ongoing_requests": 40, **scaling}})


def test_queue_depth_config_names_the_policy_and_sets_every_target():
    cfg = autoscaling_config(model(target_queue_per_replica=3, upscale_delay_s=4, downscale_delay_s=50,
                                   look_back_period_s=6))
    assert cfg is not None
    policy = cfg["policy"]
    assert policy["policy_function"] == "serve_app.autoscaling.policy:QueueDepthPolicy"
    kwargs = json.loads(json.dumps(policy["policy_kwargs"]))  # Ray requires JSON kwargs
    params = QueueDepthParams.from_kwargs(kwargs)
    assert (params.target_queue_per_replica, params.replica_slots) == (3, 6)
    assert (params.upscale_delay_s, params.downscale_delay_s, params.scale_to_zero_delay_s) == (4, 50, 50)
    # Delays are the policy's; Ray's wrapper must not count them again.
    assert cfg["upscale_delay_s"] == cfg["downscale_delay_s"] == cfg["downscale_to_zero_delay_s"] == 0
    assert cfg["target_ongoing_requests"] == 8.0 and cfg["look_back_period_s"] == 6
    validated = AutoscalingConfig(**cfg)
    assert validated.policy.policy_function == policy["policy_function"]
    assert validated.policy.policy_kwargs == policy["policy_kwargs"]


def test_ongoing_requests_policy_is_rays_default_with_an_explicit_target():
    cfg = autoscaling_config(model(policy="ongoing_requests", target_ongoing_requests=5, upscale_delay_s=2,
                                   downscale_delay_s=20, scale_to_zero_delay_s=90, min_replicas=0))
    assert "policy" not in cfg
    assert cfg["target_ongoing_requests"] == 5
    assert (cfg["upscale_delay_s"], cfg["downscale_delay_s"], cfg["downscale_to_zero_delay_s"]) == (2, 20, 90)
    assert AutoscalingConfig(**cfg).policy.is_default_policy_function()


def test_fixed_replicas_get_num_replicas_and_no_autoscaling():
    m = model(min_replicas=2, max_replicas=2)
    assert autoscaling_config(m) is None
    assert scaling_options(m) == {"max_ongoing_requests": 40, "max_queued_requests": -1,
                                  "max_surge_percent": 0, "num_replicas": 2}


def test_serve_hands_a_replica_no_more_than_the_gateways_line_sends_it():
    assert scaling_options(model(), line_per_replica=6)["max_ongoing_requests"] == 6
    assert scaling_options(model(), line_per_replica=64)["max_ongoing_requests"] == 40  # the profile's bound
    assert scaling_options(model())["max_ongoing_requests"] == 40


def test_each_model_deployment_is_built_with_its_lines_figure():
    """The graph wires the line's per-replica figure into Serve's limit: a queue-depth model
    gets its engine slots (or the profile's explicit capacity), a model scaled by Ray's policy
    keeps ``max_ongoing_requests`` (its line sends that much)."""
    from serve_app.app import build_model_node

    args = dict(_sim_args())
    models = [dict(m) for m in args["models"]]
    for m in models:
        if m["alias"] == "r1-distill":
            m["scaling"] = {**m["scaling"], "policy": "ongoing_requests", "target_ongoing_requests": 5}
    args["models"] = models
    args["resilience"] = {**args["resilience"], "admission": {"coder": {"capacity": 12}}}
    cfg = parse_config(args)

    def serve_limit(alias: str) -> int:
        return build_model_node(cfg.model(alias), cfg)._bound_deployment._deployment_config.max_ongoing_requests

    assert (cfg.model("qwen-72b").simulated.max_num_seqs, cfg.model("qwen-72b").scaling.max_ongoing_requests) == (20, 40)
    assert serve_limit("qwen-72b") == 20           # its slots: what the line sends a replica
    assert serve_limit("coder") == 12              # the profile's explicit capacity
    assert serve_limit("r1-distill") == cfg.model("r1-distill").scaling.max_ongoing_requests


def test_options_are_accepted_by_serve_deployment():
    @serve.deployment
    class Echo:
        def __call__(self, x):
            return x

    options = scaling_options(model(initial_replicas=2))
    dep = Echo.options(**options)
    ac = dep._deployment_config.autoscaling_config
    assert (ac.min_replicas, ac.initial_replicas, ac.max_replicas) == (1, 2, 3)
    assert ac.policy.policy_function.endswith(":QueueDepthPolicy")
    assert dep._deployment_config.max_ongoing_requests == 40


def test_replica_slots_sources():
    assert replica_slots(model()) == 6                              # simulated max_num_seqs
    assert replica_slots(model(replica_slots=3)) == 3               # operator override
    assert replica_slots(model(max_ongoing_requests=4)) == 4        # Serve never hands it more
    vllm = ModelSettings.model_validate({"alias": "coder", "role": "code", "backend": "vllm",
                                         "engine": {"model": "m", "max_num_seqs": 16},
                                         "scaling": {"max_ongoing_requests": 30, "max_replicas": 2}})
    assert replica_slots(vllm) == 16
    vllm.engine.max_num_seqs = None
    assert replica_slots(vllm) == 30


def _sim_args():
    return horizon_args(read_document("configs/sim.yaml"))


def test_schedule_needs_the_queue_depth_policy():
    args = json.loads(json.dumps(_sim_args()))
    args["models"][1]["scaling"].update(policy="ongoing_requests",
                                        schedule=[{"start": "08:00", "end": "20:00", "min_replicas": 1}])
    with pytest.raises(ConfigError, match=r"models\[1\]\.scaling\.schedule"):
        parse_config(args)


def test_look_back_must_exceed_the_metrics_interval():
    args = json.loads(json.dumps(_sim_args()))
    args["models"][1]["scaling"].update(look_back_period_s=1.0, metrics_interval_s=1.0)
    with pytest.raises(ConfigError, match=r"models\[1\]\.scaling\.look_back_period_s"):
        parse_config(args)


def test_every_autoscaled_model_of_the_shipped_profiles_validates():
    for profile in ("sim", "fleet", "local"):
        for m in load_config(f"configs/{profile}.yaml").models:
            cfg = autoscaling_config(m)
            if cfg is not None:
                AutoscalingConfig(**cfg)


def test_policy_through_rays_own_context_and_wrapper():
    """Real AutoscalingContext and Serve's custom-policy wrapper: the contract as 2.60 runs it."""
    from ray.serve._private.autoscaling_state import _resolve_policy_callable
    from ray.serve._private.common import DeploymentID, ReplicaID, TimeStampedValue
    from ray.serve.autoscaling_policy import _apply_autoscaling_config

    cfg = AutoscalingConfig(**autoscaling_config(model(upscale_delay_s=2, max_replicas=4)))
    policy = _apply_autoscaling_config(_resolve_policy_callable(cfg.policy))
    dep = DeploymentID(name="model-qwen-72b", app_name="horizon")
    replica = ReplicaID(unique_id="a", deployment_id=dep)

    def ctx(now, state, target=1):
        sample = [TimeStampedValue(now, 14.0)]
        return AutoscalingContext(
            deployment_id=dep, deployment_name=dep.name, app_name=dep.app_name,
            current_num_replicas=1, target_num_replicas=target, running_replicas=[replica],
            total_num_requests=20.0, total_queued_requests=0.0,
            aggregated_metrics=None, raw_metrics=lambda: {"engine_waiting": {replica: sample}},
            capacity_adjusted_min_replicas=1, capacity_adjusted_max_replicas=4, policy_state=state,
            last_scale_up_time=None, last_scale_down_time=None, current_time=now, config=cfg)

    # 6 decoding + 14 waiting = 20; 20 / (6 + 2) -> 3 replicas, after the 2 s delay only.
    n, state = policy(ctx(100.0, {}))
    assert n == 1
    n, state = policy(ctx(101.0, state))
    assert n == 1
    n, state = policy(ctx(102.0, state))
    assert n == 3


def test_fleet_profile_uses_the_delays_docs_recommend_for_queue_depth():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "autoscaling.md").read_text(encoding="utf-8")
    recommended = {key: float(re.search(rf"\| `{key}` \| \*\*(\d+) s\*\*", doc).group(1))
                   for key in ("upscale_delay_s", "downscale_delay_s")}
    assert recommended == {"upscale_delay_s": 15.0, "downscale_delay_s": 600.0}
    scaled = [m for m in load_config("configs/fleet.yaml").models
              if m.scaling.autoscaling and m.scaling.policy == "queue_depth" and m.scaling.min_replicas >= 1]
    assert [m.alias for m in scaled] == ["qwen-72b"]
    for m in scaled:
        assert m.scaling.upscale_delay_s == recommended["upscale_delay_s"], m.alias
        assert m.scaling.downscale_delay_s == recommended["downscale_delay_s"], m.alias
