"""Load-time Fusion checks: every error names the exact key path."""

from pathlib import Path

import pytest

from serve_app.config.loader import ConfigError, load_config, parse_config

from fusion_fakes import config_doc, fusion_decision

REPO = Path(__file__).resolve().parents[3]
BASE = "routing.decisions[1].algorithm.fusion"


def _error_paths(doc) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    return info.value.paths


def test_valid_fusion_decision_loads_with_seed_list_overrides():
    cfg = parse_config(config_doc(fusion_decision(
        analysis_overrides=[{"model": "coder", "temperature": 0.15, "max_completion_tokens": 512}])))
    params = cfg.decision("panel").algorithm.fusion
    assert params.override_for("coder").temperature == 0.15
    assert params.override_for("qwen-72b") is None


def test_mapping_form_of_overrides_is_accepted():
    cfg = parse_config(config_doc(fusion_decision(analysis_overrides={"coder": {"temperature": 0.3}})))
    assert cfg.decision("panel").algorithm.fusion.override_for("coder").temperature == 0.3


def test_quorum_larger_than_modelrefs_panel_is_rejected():
    assert _error_paths(config_doc(fusion_decision(min_successful_responses=4))) == \
        [f"{BASE}.min_successful_responses"]


def test_quorum_checked_against_analysis_models_not_modelrefs():
    doc = config_doc(fusion_decision(analysis_models=["qwen-72b", "coder"], min_successful_responses=3))
    assert _error_paths(doc) == [f"{BASE}.min_successful_responses"]
    parse_config(config_doc(fusion_decision(analysis_models=["qwen-72b", "coder"],
                                            min_successful_responses=2)))


@pytest.mark.parametrize("mode", ["one_call", "none"])
def test_analysis_template_outside_separate_is_rejected(mode):
    doc = config_doc(fusion_decision(analysis_mode=mode, analysis_template="compare {{responses}}"))
    assert _error_paths(doc) == [f"{BASE}.analysis_template"]


def test_blank_analysis_template_outside_separate_and_any_template_in_separate_are_fine():
    parse_config(config_doc(fusion_decision(analysis_mode="none", analysis_template="   ")))
    parse_config(config_doc(fusion_decision(analysis_mode="separate", analysis_template="x {{responses}}")))


def test_override_for_model_off_the_panel_is_rejected():
    doc = config_doc(fusion_decision(analysis_models=["qwen-72b", "coder"], analysis_overrides=[
        {"model": "coder", "temperature": 0.1}, {"model": "r1-distill", "temperature": 0.1}]))
    assert _error_paths(doc) == [f"{BASE}.analysis_overrides[1].model"]


def test_duplicate_override_is_rejected():
    doc = config_doc(fusion_decision(analysis_overrides=[{"model": "coder"}, {"model": "coder"}]))
    assert _error_paths(doc) == [f"{BASE}.analysis_overrides[1].model"]


@pytest.mark.parametrize("key,value", [("on_error", "retry"), ("analysis_mode", "two_call")])
def test_unknown_on_error_and_analysis_mode_name_the_key(key, value):
    assert _error_paths(config_doc(fusion_decision(**{key: value}))) == [f"{BASE}.{key}"]


@pytest.mark.parametrize("version", ["/", "../prompts-elsewhere", "  ", "v" * 200])
def test_a_prompt_version_that_is_not_a_directory_name_fails_at_load(version):
    # "/" named the filesystem root as the judge's prompt set: every Fusion request of the
    # decision failed looking for /analysis.txt (found by mutating every leaf of the profile).
    assert _error_paths(config_doc(fusion_decision(judge_prompt_version=version))) == \
        [f"{BASE}.judge_prompt_version"]


def test_a_prompt_version_without_a_directory_is_a_label_for_the_trace():
    cfg = parse_config(config_doc(fusion_decision(judge_prompt_version="fusion-v2.experiment_3")))
    assert cfg.decision("panel").algorithm.fusion.judge_prompt_version == "fusion-v2.experiment_3"


@pytest.mark.parametrize("slug", ["vllm-sr/fusion", "vllm-sr/auto"])
def test_routing_slug_as_judge_is_rejected(slug):
    with pytest.raises(ConfigError) as info:
        parse_config(config_doc(fusion_decision(model=slug)))
    assert info.value.paths == [f"{BASE}.model"]
    assert "recursive" in str(info.value)


def test_fusion_slug_as_panel_model_is_rejected_including_extra_registered_slugs():
    doc = config_doc(fusion_decision(analysis_models=["qwen-72b", "openrouter/fusion"]),
                     **{"global": {"integrations": {"looper": {"fusion": {
                         "model_names": ["vllm-sr/fusion", "openrouter/fusion"]}}}}})
    assert _error_paths(doc) == [f"{BASE}.analysis_models[1]"]


def test_unknown_and_embedding_models_as_judge_or_panel_are_rejected():
    assert _error_paths(config_doc(fusion_decision(model="gpt-9"))) == [f"{BASE}.model"]
    assert _error_paths(config_doc(fusion_decision(analysis_models=["bge-m3"]))) == \
        [f"{BASE}.analysis_models[0]"]


def test_grounding_requires_an_embedding_model():
    doc = config_doc(fusion_decision(grounding={"enabled": True}), embedding=False)
    assert _error_paths(doc) == [f"{BASE}.grounding.enabled"]


def test_grounding_defaults_follow_the_reference():
    cfg = parse_config(config_doc(fusion_decision(grounding={"enabled": True})))
    grounding = cfg.decision("panel").algorithm.fusion.grounding
    assert (grounding.reference, grounding.policy, grounding.min_score, grounding.min_keep,
            grounding.on_error) == ("hybrid", "weight", 0.0, 1, "skip")


def test_sim_profile_carries_the_fusion_panel_decision():
    cfg = load_config(REPO / "configs" / "sim.yaml")
    decision = cfg.decision("fusion_panel")
    assert decision.algorithm.type == "fusion"
    assert decision.algorithm.fusion.model == "k2"
    assert decision.algorithm.fusion.effective_panel([r.model for r in decision.model_refs]) == \
        ["qwen-72b", "r1-distill", "coder"]
    assert decision.rules.model_dump()["conditions"] == [{"type": "keyword", "name": "fusion"}]


def test_a_decision_panel_over_the_maximum_panel_size_fails_at_load():
    small = {"integrations": {"looper": {"fusion": {"max_panel_size": 2}}}}
    assert _error_paths(config_doc(fusion_decision(), **{"global": small})) == ["routing.decisions[1].modelRefs"]
    assert _error_paths(config_doc(fusion_decision(analysis_models=["qwen-72b", "coder", "k2"]),
                                   **{"global": small})) == [f"{BASE}.analysis_models"]
    assert parse_config(config_doc(fusion_decision())).global_.integrations.looper.fusion.max_panel_size == 8


@pytest.mark.parametrize("template", ["analysis_template", "synthesis_template"])
def test_a_template_placeholder_the_renderer_does_not_know_fails_at_load(template):
    # Left as literal text, a misspelt {{responses}} would hide the panel's answers from the judge.
    doc = config_doc(fusion_decision(**{template: "{{original}}\n{{response}}"}))
    with pytest.raises(ConfigError, match=r"unknown placeholder\(s\) \{\{response\}\}") as info:
        parse_config(doc)
    assert info.value.paths == [f"{BASE}.{template}"]
    parse_config(config_doc(fusion_decision(**{template: "{{ original }} {{responses}} {{analysis}}"})))


def test_a_fusion_answer_length_that_fills_a_readers_window_fails_at_load():
    # The simulated models' window is engine.max_model_len (4,096 by default): every request of
    # the decision would be refused by the panel's engines, whatever the client sends.
    assert _error_paths(config_doc(fusion_decision(max_completion_tokens=4096))) == \
        [f"{BASE}.max_completion_tokens"]
    assert _error_paths(config_doc(fusion_decision(analysis_overrides=[
        {"model": "coder", "max_completion_tokens": 5000}]))) == [f"{BASE}.analysis_overrides[0].max_completion_tokens"]
    parse_config(config_doc(fusion_decision(max_completion_tokens=1024)))
