"""configs/fleet.yaml is the SPEC §2 production fleet and loads with the project loader."""

from __future__ import annotations

import yaml
from cluster_helpers import FLEET, ROOT

from serve_app.config import load_config

HF_IDS = {
    "k2": "01-ai/K2-AWQ",
    "qwen-72b": "Qwen/Qwen2.5-72B-Instruct",
    "r1-distill": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "coder": "Qwen/Qwen2.5-Coder-32B-Instruct",
    "minicpm-v": "openbmb/MiniCPM-V-2_6",
    "bge-m3": "BAAI/bge-m3",
}


def test_is_a_serve_config_for_the_app_builder():
    doc = yaml.safe_load(FLEET.read_text(encoding="utf-8"))
    app = doc["applications"][0]
    assert app["import_path"] == "serve_app.app:build_app"
    assert app["args"]["profile"] == "fleet"


def test_six_models_with_real_ids_and_backends():
    cfg = load_config(FLEET)
    assert {m.alias: m.engine.model for m in cfg.models} == HF_IDS
    assert {m.alias for m in cfg.models if m.backend == "vllm"} == {"k2", "qwen-72b", "r1-distill", "coder", "minicpm-v"}
    bge = cfg.model("bge-m3")
    assert bge.backend == "embedding" and bge.embedding.model_class == "bge-m3"


def test_k2_engine_matches_the_seed_command():
    e = load_config(FLEET).model("k2").engine
    assert (e.tensor_parallel_size, e.quantization, e.max_model_len, e.gpu_memory_utilization,
            e.served_model_name) == (8, "awq", 65536, 0.92, "k2")


def test_tensor_parallel_sizes_and_vision_limits():
    cfg = load_config(FLEET)
    assert {m.alias: m.engine.tensor_parallel_size for m in cfg.models if m.backend == "vllm"} == {
        "k2": 8, "qwen-72b": 2, "r1-distill": 1, "coder": 1, "minicpm-v": 1}
    assert cfg.model("minicpm-v").engine.limit_mm_per_prompt == {"image": 4}


def test_cold_models_scale_to_zero_with_a_schedule():
    cfg = load_config(FLEET)
    assert cfg.model("qwen-72b").scaling.min_replicas == 1
    for alias in ("r1-distill", "coder"):
        scaling = cfg.model(alias).scaling
        assert scaling.min_replicas == 0 and scaling.autoscaling
        assert scaling.schedule and all(w.min_replicas >= 1 for w in scaling.schedule)


def test_timeouts_per_spec():
    cfg = load_config(FLEET)
    totals = {m.alias: m.timeouts.total_s for m in cfg.models}
    assert totals["k2"] == 120
    assert totals["qwen-72b"] == totals["r1-distill"] == totals["coder"] == 60
    assert totals["minicpm-v"] == 30


def test_fallbacks_per_spec():
    r = load_config(FLEET).resilience
    assert r.fallback_chains["reasoning"] == ["r1-distill", "k2", "qwen-72b"]
    assert r.fallback_chains["code"] == ["coder", "k2"]
    assert r.fallback_chains["chat"] == ["qwen-72b", "k2"]
    assert "vision" in r.no_fallback_messages and "vision" not in r.fallback_chains
    assert r.max_fallback_depth == 1


def test_routing_is_the_simulated_profiles():
    fleet_routing = yaml.safe_load(FLEET.read_text(encoding="utf-8"))["applications"][0]["args"]["routing"]
    sim_routing = yaml.safe_load((ROOT / "configs" / "sim.yaml").read_text(encoding="utf-8"))[
        "applications"][0]["args"]["routing"]
    assert fleet_routing == sim_routing, "copy routing: from configs/sim.yaml into configs/fleet.yaml"


def test_cpu_default_routes_like_the_fleet():
    # The embedded default must route exactly as the fleet does (an image goes to the vision
    # decision and gets the missing-model error there, not a text model's answer).
    def routing(name):
        return yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text(encoding="utf-8"))[
            "applications"][0]["args"]["routing"]

    assert routing("local") == routing("sim"), "copy routing: from configs/sim.yaml into configs/local.yaml"
