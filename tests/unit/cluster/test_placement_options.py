"""Ray Serve / ray.serve.llm placement options for every fleet model, checked by Ray's own validators."""

from __future__ import annotations

import pytest
from cluster_helpers import ROOT, fleet, fleet_with, model_entry

from serve_app.capacity.errors import PlacementError
from serve_app.capacity.planner import check_placement
from serve_app.config import load_config
from serve_app.fleet.backends import backend
from serve_app.fleet.backends.vllm import llm_placement

NODE_A = {"horizon.io/node-pool": "a"}


def _as_simulated(doc):
    """The fleet with every vLLM model replaced by the simulated stand-in (same placement)."""
    for m in doc["applications"][0]["args"]["models"]:
        if m["backend"] == "vllm":
            m["backend"] = "simulated"


def deployment_options(model, cfg) -> dict:
    """The Serve options of a one-actor (or stand-in) deployment, from its backend."""
    return backend(model.backend).deployment_options(model)


def _ray_accepts(options: dict) -> None:
    """Build a Serve deployment with the options: Ray validates them without a cluster."""
    from ray import serve

    @serve.deployment
    class Probe:
        pass

    Probe.options(**options)


def test_k2_stand_in_reserves_eight_strict_packed_gpu_bundles():
    cfg = fleet_with(_as_simulated)
    opts = deployment_options(cfg.model("k2"), cfg)
    bundle = {"CPU": 2, "GPU": 1, "horizon_node_a": 0.001, "accelerator_type:A100": 0.001}
    assert opts["placement_group_bundles"] == [bundle] * 8
    assert opts["placement_group_strategy"] == "STRICT_PACK"
    assert opts["placement_group_bundle_label_selector"] == [NODE_A] * 8
    assert opts["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 1, "resources": {"horizon_node_a": 0.001}}
    _ray_accepts(opts)


def test_qwen_stand_in_reserves_two_bundles_on_node_b():
    cfg = fleet_with(_as_simulated)
    opts = deployment_options(cfg.model("qwen-72b"), cfg)
    assert len(opts["placement_group_bundles"]) == 2
    assert all(b["GPU"] == 1 and b["horizon_node_b"] == 0.001 for b in opts["placement_group_bundles"])
    _ray_accepts(opts)


@pytest.mark.parametrize("alias,node", [("r1-distill", "b"), ("coder", "b")])
def test_single_gpu_text_models_are_plain_actors(alias, node):
    cfg = fleet_with(_as_simulated)
    opts = deployment_options(cfg.model(alias), cfg)
    assert "placement_group_bundles" not in opts
    assert opts["ray_actor_options"] == {
        "num_cpus": 2, "num_gpus": 1, "accelerator_type": "A100",
        "resources": {f"horizon_node_{node}": 0.001},
        "label_selector": {"horizon.io/node-pool": node}}
    _ray_accepts(opts)


def test_vision_and_embedding_share_node_c_by_fractions():
    cfg = fleet_with(_as_simulated)
    vision = deployment_options(cfg.model("minicpm-v"), cfg)["ray_actor_options"]
    embed = deployment_options(cfg.model("bge-m3"), cfg)["ray_actor_options"]
    assert vision["num_gpus"] == 0.8 and embed["num_gpus"] == 0.2
    assert vision["num_gpus"] + embed["num_gpus"] == pytest.approx(1.0)
    assert vision["label_selector"] == embed["label_selector"] == {"horizon.io/node-pool": "c"}
    assert "accelerator_type" not in vision
    _ray_accepts({"ray_actor_options": vision})
    _ray_accepts({"ray_actor_options": embed})


def test_options_never_set_replica_counts():
    cfg = fleet_with(_as_simulated)
    for model in cfg.models:
        opts = deployment_options(model, cfg)
        assert not {"num_replicas", "autoscaling_config", "max_ongoing_requests"} & set(opts)


def test_cpu_profile_gets_no_gpu_and_no_placement_group():
    cfg = load_config(ROOT / "configs" / "sim.yaml")
    k2 = cfg.model("k2")
    assert k2.engine.tensor_parallel_size == 8
    # TP8 without GPUs: a plain CPU actor with the profile's reservation, no placement group.
    assert deployment_options(k2, cfg) == {"ray_actor_options": {"num_cpus": k2.placement.num_cpus}}
    assert k2.placement.num_cpus < 1


def test_memory_goes_to_the_actor_and_its_bundle():
    def with_memory(doc):
        model_entry(doc, "k2")["placement"]["memory_gb"] = 64
    cfg = fleet_with(lambda d: (_as_simulated(d), with_memory(d)))
    opts = deployment_options(cfg.model("k2"), cfg)
    assert opts["ray_actor_options"]["memory"] == 64_000_000_000
    assert opts["placement_group_bundles"][0]["memory"] == 64_000_000_000
    assert "memory" not in opts["placement_group_bundles"][1]
    _ray_accepts(opts)


def test_the_builder_refuses_a_model_no_node_can_take():
    def lost(doc):
        _as_simulated(doc)
        model_entry(doc, "coder")["placement"]["node_labels"] = {"horizon.io/node-pool": "z"}
    cfg = fleet_with(lost)
    with pytest.raises(PlacementError, match="coder: no node type"):
        check_placement(cfg)


def test_llm_placement_for_k2():
    cfg = fleet()
    kwargs = llm_placement(cfg.model("k2"))
    assert kwargs == {
        "placement_group_config": {"bundles": [{"CPU": 2, "GPU": 1, "horizon_node_a": 0.001}] * 8,
                                   "strategy": "STRICT_PACK"},
        "accelerator_type": "A100",
    }


@pytest.mark.parametrize("alias,gpus,bundles,strategy", [
    ("qwen-72b", 1, 2, "STRICT_PACK"), ("r1-distill", 1, 1, "PACK"), ("coder", 1, 1, "PACK"),
    ("minicpm-v", 0.8, 1, "PACK")])
def test_llm_placement_bundle_per_engine_worker(alias, gpus, bundles, strategy):
    model = fleet().model(alias)
    config = llm_placement(model)["placement_group_config"]
    assert len(config["bundles"]) == bundles == model.engine.tensor_parallel_size
    assert all(b["GPU"] == gpus for b in config["bundles"])
    assert config["strategy"] == strategy


def test_llm_placement_is_accepted_by_ray_llm_schema():
    from ray.llm._internal.common.placement import PlacementGroupConfig
    from ray.util.accelerators import accelerators

    known = {v for k, v in vars(accelerators).items() if k.isupper()}
    for model in fleet().models:
        if model.backend != "vllm":
            continue
        kwargs = llm_placement(model)
        PlacementGroupConfig(**kwargs["placement_group_config"])
        if "accelerator_type" in kwargs:
            assert kwargs["accelerator_type"] in known
    # The shared card has no Ray accelerator type: minicpm-v is pinned by resource instead.
    assert "accelerator_type" not in llm_placement(fleet().model("minicpm-v"))


def test_a_gpu_less_vllm_model_on_a_gpu_cluster_is_refused():
    cfg = fleet_with(lambda d: model_entry(d, "coder").update(placement={"num_cpus": 1}))
    with pytest.raises(PlacementError, match="coder: a vLLM model on a GPU cluster needs placement.num_gpus"):
        check_placement(cfg)


def test_a_cpu_vllm_engine_is_one_bundle_with_the_replica_actor_inside():
    k2 = load_config(ROOT / "configs" / "local.yaml").model("k2")
    kwargs = llm_placement(k2)
    assert kwargs["placement_group_config"]["bundles"] == [{"CPU": k2.placement.num_cpus}]
    assert kwargs["accelerator_config"] == {"kind": "cpu"}
    assert kwargs["deployment_config"] == {"ray_actor_options": {"num_cpus": 0}}
