"""Placements that cannot work are refused with the model and the reason, before deploying."""

from __future__ import annotations

import pytest
from cluster_helpers import FACTS, fleet_with, model_entry, node_entry

from serve_app.capacity.errors import PlacementError
from serve_app.capacity.planner import check_placement, plan


def _refused(edit) -> PlacementError:
    cfg = fleet_with(edit)
    with pytest.raises(PlacementError) as info:
        check_placement(cfg, FACTS)
    assert isinstance(info.value, ValueError)
    return info.value


def test_k2_tp8_on_a_four_gpu_node():
    def shrink_node_a(doc):
        node_entry(doc, "node-a")["gpus"] = 4
    err = _refused(shrink_node_a)
    assert err.model == "k2"
    assert "8 GPUs" in err.reason and "node-a" in err.reason and "4 per node" in err.reason


def test_k2_pinned_to_the_text_node():
    def move_k2(doc):
        p = model_entry(doc, "k2")["placement"]
        p["node_labels"] = {"horizon.io/node-pool": "b"}
        p["resources"] = {"horizon_node_b": 0.001}
    err = _refused(move_k2)
    assert err.model == "k2" and "node-b" in err.reason


def test_tensor_parallel_must_divide_attention_heads():
    def tp3(doc):
        model_entry(doc, "qwen-72b")["engine"]["tensor_parallel_size"] = 3
    err = _refused(tp3)
    assert err.model == "qwen-72b"
    assert "does not divide the 64 attention heads" in err.reason


def test_tensor_parallel_must_fit_the_kv_heads():
    def tp7(doc):
        # 28 attention heads divide by 7, 4 KV heads neither divide nor are divided by it.
        model_entry(doc, "minicpm-v")["engine"]["tensor_parallel_size"] = 7
        model_entry(doc, "minicpm-v")["placement"]["num_gpus"] = 0.1
        model_entry(doc, "bge-m3")["placement"]["num_gpus"] = 0.1
    err = _refused(tp7)
    assert err.model == "minicpm-v" and "4 KV heads" in err.reason


def test_bf16_qwen_72b_does_not_fit_tp2():
    def bf16(doc):
        del model_entry(doc, "qwen-72b")["engine"]["quantization"]
    err = _refused(bf16)
    assert err.model == "qwen-72b"
    assert "cannot hold one sequence of max_model_len 32768" in err.reason


def test_unquantised_k2_weights_do_not_fit_node_a():
    def bf16(doc):
        del model_entry(doc, "k2")["engine"]["quantization"]
    err = _refused(bf16)
    assert err.model == "k2" and "weights 2000.0 GB do not fit" in err.reason


def test_fractional_gpus_above_one_on_the_shared_card():
    def greedy_embedder(doc):
        model_entry(doc, "bge-m3")["placement"]["num_gpus"] = 0.3
    err = _refused(greedy_embedder)
    assert "minicpm-v" in err.model and "bge-m3" in err.model
    assert "1.1 GPUs" in err.reason and "node-c" in err.reason


def test_vllm_memory_share_above_its_gpu_share():
    def greedy_vision(doc):
        model_entry(doc, "minicpm-v")["engine"]["gpu_memory_utilization"] = 0.9
    err = _refused(greedy_vision)
    assert err.model == "minicpm-v" and "exceeds its 0.8 share" in err.reason


def test_shared_card_memory_overcommitted():
    def bigger_reserve(doc):
        doc["applications"][0]["args"]["cluster"]["planning"]["activation_reserve_gb_per_gpu"] = 4.0
        model_entry(doc, "minicpm-v")["engine"]["gpu_memory_utilization"] = 0.8
        model_entry(doc, "minicpm-v")["engine"]["max_model_len"] = 1024
        model_entry(doc, "minicpm-v")["engine"]["engine_kwargs"]["kv_cache_dtype"] = "fp8"
    cfg = fleet_with(bigger_reserve)
    report = plan(cfg, FACTS)
    messages = [str(e) for e in report.errors]
    # bge-m3 needs 1.1 + 4 GB > its 4.8 GB share, and both together claim over 100 % of the card.
    assert any(m.startswith("bge-m3:") and "0.2 GPU share" in m for m in messages)
    assert any("claim" in m and "node-c" in m for m in messages)


def test_schedule_windows_that_overfill_node_b():
    def resident_coder(doc):
        model_entry(doc, "qwen-72b")["scaling"]["min_replicas"] = 2
    err = _refused(resident_coder)
    assert "qwen-72b" in err.model and "r1-distill" in err.model
    assert "from 08:00" in err.reason and "need 6 GPUs" in err.reason and "has 4" in err.reason


def test_no_node_type_offers_the_labels():
    def lost(doc):
        model_entry(doc, "coder")["placement"]["node_labels"] = {"horizon.io/node-pool": "z"}
    err = _refused(lost)
    assert err.model == "coder" and "no node type" in err.reason and "node-pool" in err.reason


def test_vllm_accelerator_type_must_be_one_ray_llm_accepts():
    def consumer_card(doc):
        model_entry(doc, "minicpm-v")["placement"]["accelerator_type"] = "GeForce-RTX-4090"
    err = _refused(consumer_card)
    assert err.model == "minicpm-v" and "ray.serve.llm" in err.reason


def test_vllm_without_gpus_on_a_gpu_cluster():
    def cpu_k2(doc):
        model_entry(doc, "k2")["placement"] = {"num_cpus": 4}
    err = _refused(cpu_k2)
    assert err.model == "k2" and "num_gpus" in err.reason


def test_placement_error_message_names_model_first():
    err = PlacementError("k2", "something is wrong")
    assert str(err) == "k2: something is wrong"


def test_a_window_longer_than_the_model_has_positions_is_refused_unless_they_are_stretched():
    # The facts file held max_position_embeddings all along and nothing read it: a qwen-72b at
    # 65536 passed plan and validate, and vLLM refuses such an engine when it starts.
    def longer(doc):
        model_entry(doc, "qwen-72b")["engine"]["max_model_len"] = 65536
    err = _refused(longer)
    assert err.model == "qwen-72b"
    assert "max_model_len 65536 is above the 32768 positions" in err.reason

    def stretched(doc):
        longer(doc)
        model_entry(doc, "qwen-72b")["engine"].setdefault("engine_kwargs", {})["hf_overrides"] = {
            "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32768}}
    check_placement(fleet_with(stretched), FACTS)

    def allowed(doc):
        # vLLM's own escape hatch (it then only warns): the operator has said they know.
        longer(doc)
        model_entry(doc, "qwen-72b")["engine"]["env"] = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    check_placement(fleet_with(allowed), FACTS)
