"""Capacity arithmetic of the planner on the fleet profile (SPEC §2 figures)."""

from __future__ import annotations

import pytest
from cluster_helpers import FACTS, fleet, fleet_with, model_entry

from serve_app.capacity.planner import check_placement, kv_bytes_per_token, plan, replicas_at


def test_k2_case_reproduces_the_seed():
    """≈500 GB AWQ weights on 8x80 GB leave ≈140 GB; at 131072 tokens about 8 sequences fit."""
    k2 = plan(fleet(), FACTS, context_tokens=131072).model("k2")
    assert k2.node_type == "node-a"
    assert k2.gpus_per_replica == 8
    assert k2.weight_gb == pytest.approx(500, rel=0.02)
    assert k2.replica_gpu_memory_gb == 640
    assert k2.headroom_gb == pytest.approx(140, rel=0.05)
    # 640 x 0.92 - 500 - 8 x 1 GB activation reserve.
    assert k2.kv_pool_gb == pytest.approx(80.8)
    assert k2.sequences_at_context == 8


def test_k2_at_its_served_context_holds_twice_as_many():
    k2 = plan(fleet(), FACTS).model("k2")
    assert k2.context_tokens == 65536
    assert k2.sequences_at_context == 16


def test_kv_bytes_per_token_follows_the_architecture():
    cfg = fleet()
    # Qwen2.5-72B: 2 (K,V) x 80 layers x 8 KV heads x 128 dims x 2 bytes.
    assert kv_bytes_per_token(cfg.model("qwen-72b"), FACTS.for_model(cfg.model("qwen-72b")), FACTS) == 327_680
    # Qwen2-7B inside MiniCPM-V: 2 x 28 x 4 x 128 x 2.
    assert kv_bytes_per_token(cfg.model("minicpm-v"), FACTS.for_model(cfg.model("minicpm-v")), FACTS) == 57_344


def test_kv_heads_are_replicated_when_tensor_parallel_exceeds_them():
    def tp16(doc):
        model_entry(doc, "qwen-72b")["engine"]["tensor_parallel_size"] = 16
    cfg = fleet_with(tp16)
    qwen = cfg.model("qwen-72b")
    # 8 KV heads over 16 ranks: every rank keeps one, so 16 are stored.
    assert kv_bytes_per_token(qwen, FACTS.for_model(qwen), FACTS) == 2 * 327_680


def test_fp8_kv_cache_halves_the_cost_per_token():
    def fp8_kv(doc):
        model_entry(doc, "qwen-72b")["engine"]["engine_kwargs"] = {"kv_cache_dtype": "fp8"}
    qwen = fleet_with(fp8_kv).model("qwen-72b")
    assert kv_bytes_per_token(qwen, FACTS.for_model(qwen), FACTS) == 327_680 // 2


def test_fleet_profile_places_cleanly():
    report = plan(fleet(), FACTS)
    assert report.errors == []
    check_placement(fleet(), FACTS)
    assert {m.alias: m.node_type for m in report.models} == {
        "k2": "node-a", "qwen-72b": "node-b", "r1-distill": "node-b", "coder": "node-b",
        "minicpm-v": "node-c", "bge-m3": "node-c"}


def test_quantisation_sets_weight_memory():
    report = plan(fleet(), FACTS)
    assert report.model("qwen-72b").weight_gb == pytest.approx(72.7)  # fp8: 1 byte per parameter
    assert report.model("coder").weight_gb == pytest.approx(32.8)
    assert report.model("bge-m3").weight_gb == pytest.approx(0.568 * 2)  # fp16 encoder
    assert report.model("bge-m3").kv_bytes_per_token is None


def test_shared_gpu_shows_each_share():
    report = plan(fleet(), FACTS)
    assert report.model("minicpm-v").replica_gpu_memory_gb == pytest.approx(0.8 * 24)
    assert report.model("bge-m3").replica_gpu_memory_gb == pytest.approx(0.2 * 24)
    assert report.model("minicpm-v").sequences_at_context >= 1


def test_replicas_for_target_qps_use_littles_law():
    report = plan(fleet(), FACTS, target_qps={"qwen-72b": 10, "k2": 1})
    # 10 QPS x 3.2 s in flight / 20 per replica = 1.6 -> 2.
    assert report.model("qwen-72b").suggested_replicas == 2
    # 1 QPS x 18.6 s / 8 = 2.3 -> 3, above k2's max_replicas of 1: reported.
    k2 = report.model("k2")
    assert k2.suggested_replicas == 3
    assert any("max_replicas" in note for note in k2.notes)


def test_kv_cache_caps_concurrency_below_the_measured_figure():
    def smaller_share(doc):
        model_entry(doc, "minicpm-v")["engine"]["gpu_memory_utilization"] = 0.74
    report = plan(fleet_with(smaller_share), FACTS)
    assert report.errors == []
    minicpm = report.model("minicpm-v")
    # 24 x 0.74 - 16.2 - 1 = 0.56 GB of KV: six 1500-token requests, not the measured 10.
    assert minicpm.concurrency_per_replica == 6
    assert any("limits concurrency to 6" in note for note in minicpm.notes)


def test_tokens_per_request_and_a_latency_target_are_planned_per_model():
    # SPEC §8: expected QPS, tokens per request, target latency -> replicas and GPUs.
    report = plan(fleet(), FACTS, target_qps={"qwen-72b": 10}, tokens_per_request={"qwen-72b": 20000},
                  target_latency_s={"qwen-72b": 2, "coder": 5})
    qwen = report.model("qwen-72b")
    # 72.5 GB of KV / (320 KiB x 20,000 tokens) = 11 requests at once, not the measured 20;
    # 10 QPS x 3.2 s / 11 = 2.9 -> 3 replicas.
    assert qwen.concurrency_per_replica == 11 and qwen.suggested_replicas == 3
    assert any("limits concurrency to 11 at 20000 tokens/request" in n for n in qwen.notes)
    assert any("3.2 s is above the 2 s target" in n for n in qwen.notes)
    # The coder's measured 4.1 s meets its 5 s: nothing to say.
    assert not any("target" in n for n in report.model("coder").notes)
    with pytest.raises(ValueError, match="tokens per request given for unknown models"):
        plan(fleet(), FACTS, tokens_per_request={"nope": 5})


def test_unknown_alias_in_target_qps_is_refused():
    with pytest.raises(ValueError, match="nope"):
        plan(fleet(), FACTS, target_qps={"nope": 1})


def test_node_b_is_full_in_the_windows_and_time_shared_above_them():
    node_b = plan(fleet(), FACTS).node("node-b")
    assert node_b.resident_gpus == 4
    assert node_b.resident_peak_at == "08:00"
    assert node_b.max_gpus == 6
    assert any("time-shared" in note for note in node_b.notes)


def test_schedule_windows_raise_minimum_replicas_including_past_midnight():
    cfg = fleet()
    coder = cfg.model("coder")
    assert replicas_at(coder, 7 * 60 + 59) == 0
    assert replicas_at(coder, 8 * 60) == 1
    assert replicas_at(coder, 20 * 60) == 0

    def night_coder(doc):
        model_entry(doc, "coder")["scaling"]["schedule"] = [{"start": "22:00", "end": "06:00", "min_replicas": 1}]
    night = fleet_with(night_coder).model("coder")
    assert replicas_at(night, 23 * 60) == 1
    assert replicas_at(night, 5 * 60) == 1
    assert replicas_at(night, 12 * 60) == 0


def test_profile_without_cluster_plans_only_what_facts_allow():
    from serve_app.config import load_config
    from cluster_helpers import ROOT
    report = plan(load_config(ROOT / "configs" / "sim.yaml"), FACTS)
    assert report.errors == []
    assert report.nodes == []
    k2 = report.model("k2")
    assert k2.weight_gb == pytest.approx(500, rel=0.02)
    assert k2.kv_pool_gb is None


def test_the_cpu_profiles_cache_holds_what_its_comment_says():
    # configs/local.yaml: "320 MiB of KV cache: ≈ 14,500 tokens of SmolLM2 (22.5 KiB a token),
    # every slot a 900-token context at once, or seven full 2,048-token windows".
    from serve_app.config import load_config
    from cluster_helpers import ROOT
    cfg = load_config(ROOT / "configs" / "local.yaml")
    report = plan(cfg, FACTS)
    assert report.errors == []
    k2 = report.model("k2")
    assert k2.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2 == 22.5 * 1024
    assert k2.kv_pool_gb == pytest.approx(335_544_320 / 1e9)
    assert k2.context_tokens == 2048 and k2.sequences_at_context == 7
    assert 14_500 <= 335_544_320 // k2.kv_bytes_per_token < 14_600
    slots = cfg.model("k2").engine.max_num_seqs
    assert plan(cfg, FACTS, context_tokens=900).model("k2").sequences_at_context >= slots


def test_a_fixed_kv_cache_size_is_the_pool_per_gpu_and_must_fit_beside_the_weights():
    # vLLM's kv_cache_memory_bytes replaces gpu_memory_utilization's share, per GPU.
    def fixed(size):
        def edit(doc):
            model_entry(doc, "qwen-72b")["engine"]["engine_kwargs"] = {"kv_cache_memory_bytes": size}
        return fleet_with(edit)
    report = plan(fixed(20 * 10**9), FACTS)
    assert report.errors == []
    qwen = report.model("qwen-72b")             # TP2: two GPUs of 20 GB of cache each
    assert qwen.kv_pool_gb == pytest.approx(40.0)
    assert qwen.sequences_at_context == int(40e9 // (327_680 * 32768))
    # 72.7 GB of FP8 weights over two 80 GB GPUs leave ≈ 43 GB a GPU, less the 1 GB reserve.
    [error] = plan(fixed(45 * 10**9), FACTS).errors
    assert error.model == "qwen-72b" and "kv_cache_memory_bytes 45.0 GB" in str(error)
    with pytest.raises(ValueError, match="kv_cache_memory_bytes"):
        check_placement(fixed(45 * 10**9), FACTS)
