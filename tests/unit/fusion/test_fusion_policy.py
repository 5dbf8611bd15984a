"""Policy resolution: defaults, request overrides, recursion guard, fusion_direct, the exact 400."""

import pytest

from serve_app.config.loader import ConfigError, parse_config
from serve_app.errors import InvalidRequest
from serve_app.fusion.policy import (find_fusion_plugin, no_eligible_decision_error,
                                     resolve_policy)

from fusion_fakes import config_doc, fusion_decision, make_config

EXACT_400 = ('no eligible Fusion decision matched for model "vllm-sr/fusion" and no request '
             'plugins[].id=fusion analysis_models override was provided')


@pytest.fixture
def cfg():
    return make_config(
        {**fusion_decision(analysis_overrides=[{"model": "coder", "temperature": 0.1}]),
         "output_contract": "Answer in one line."},
        {"name": "bare", "modelRefs": [{"model": "qwen-72b"}, {"model": "coder"}],
         "algorithm": {"type": "fusion"}})


def _request(**kw):
    return {"model": "vllm-sr/fusion", "messages": [{"role": "user", "content": "hi"}], **kw}


def _plugin(**kw):
    return {"id": "fusion", **kw}


def test_find_fusion_plugin():
    assert find_fusion_plugin(_request()) is None
    plugin = _plugin(model="k2")
    assert find_fusion_plugin(_request(plugins=[{"id": "web"}, plugin])) is plugin
    with pytest.raises(InvalidRequest) as info:
        find_fusion_plugin(_request(plugins="fusion"))
    assert info.value.param == "plugins"
    with pytest.raises(InvalidRequest) as info:
        find_fusion_plugin(_request(plugins=[_plugin(), _plugin()]))
    assert info.value.param == "plugins[1]"


def test_decision_defaults_are_resolved(cfg):
    policy = resolve_policy(cfg, cfg.decision("bare"), None, _request())
    assert policy.panel == ("qwen-72b", "coder")
    assert policy.judge == "qwen-72b"                # first panel model
    assert policy.min_successful_responses == 2      # panel size
    assert policy.max_concurrent == 2                # panel size
    assert policy.analysis_mode == "separate" and policy.on_error == "skip"
    assert policy.include_analysis and policy.include_intermediate_responses
    assert policy.prompt_version == "fusion-v1"
    assert policy.decision == "bare" and policy.response_model == "vllm-sr/fusion"


def test_decision_settings_carry_into_the_policy(cfg):
    policy = resolve_policy(cfg, cfg.decision("panel"), None, _request(model="vllm-sr/auto"))
    assert policy.judge == "k2" and policy.panel == ("qwen-72b", "r1-distill", "coder")
    assert policy.params.override_for("coder").temperature == 0.1
    assert policy.output_contract == "Answer in one line."
    assert policy.response_model == "vllm-sr/auto"
    assert policy.request_overrides == ()


def test_response_model_is_fusion_when_the_request_named_no_slug(cfg):
    policy = resolve_policy(cfg, cfg.decision("panel"), None, _request(model="qwen-72b"))
    assert policy.response_model == "fusion"


def test_plugin_overrides_judge_panel_and_runtime_fields(cfg):
    plugin = _plugin(model="r1-distill", analysis_models=["coder", "k2"], max_concurrent=1,
                     temperature=0.2, max_completion_tokens=64, round_timeout_seconds=3,
                     analysis_frequency_penalty=0.5,
                     min_successful_responses=1, on_error="fail", analysis_mode="none",
                     include_analysis=False, include_intermediate_responses=False)
    policy = resolve_policy(cfg, cfg.decision("panel"), plugin, _request(plugins=[plugin]))
    assert (policy.judge, policy.panel) == ("r1-distill", ("coder", "k2"))
    assert (policy.max_concurrent, policy.temperature, policy.max_completion_tokens) == (1, 0.2, 64)
    assert policy.analysis_frequency_penalty == 0.5
    assert (policy.round_timeout_seconds, policy.min_successful_responses, policy.on_error) == (3, 1, "fail")
    assert policy.analysis_mode == "none"
    assert not policy.include_analysis and not policy.include_intermediate_responses
    assert policy.decision == "panel"
    # The decision's override for coder still applies: coder stays on the panel.
    assert policy.params.override_for("coder").temperature == 0.1
    assert "analysis_models" in policy.request_overrides and "model" in policy.request_overrides


def _judge_defaults(penalty, *decisions):
    doc = config_doc(*decisions)
    next(m for m in doc["models"] if m["alias"] == "k2")["fusion_judge"] = \
        {"analysis_frequency_penalty": penalty}
    return parse_config(doc)


def test_the_analysis_penalty_is_the_requests_else_the_decisions_else_the_judge_models():
    cfg = _judge_defaults(0.5, fusion_decision(), fusion_decision("tuned", analysis_frequency_penalty=0.2))
    direct = _plugin(model="k2", analysis_models=["qwen-72b", "coder"])
    assert resolve_policy(cfg, None, direct, _request(plugins=[direct])).analysis_frequency_penalty == 0.5
    assert resolve_policy(cfg, cfg.decision("panel"), None, _request()).analysis_frequency_penalty == 0.5
    assert resolve_policy(cfg, cfg.decision("tuned"), None, _request()).analysis_frequency_penalty == 0.2
    off = _plugin(analysis_frequency_penalty=0.0)
    assert resolve_policy(cfg, cfg.decision("tuned"), off,
                          _request(plugins=[off])).analysis_frequency_penalty == 0.0
    # A judge without a default: none is sent (the request's own frequency_penalty applies).
    other = _plugin(model="coder", analysis_models=["qwen-72b", "k2"])
    assert resolve_policy(cfg, None, other, _request(plugins=[other])).analysis_frequency_penalty is None


def test_an_alias_sharing_the_judges_engine_has_its_default_unless_it_sets_its_own():
    doc = config_doc(fusion_decision())
    models = {m["alias"]: m for m in doc["models"]}
    models["k2"]["fusion_judge"] = {"analysis_frequency_penalty": 0.5}
    models["qwen-72b"]["shares_engine_with"] = "k2"
    models["coder"]["shares_engine_with"] = "k2"
    models["coder"]["fusion_judge"] = {"analysis_frequency_penalty": 0.1}
    cfg = parse_config(doc)
    for judge, penalty in [("qwen-72b", 0.5), ("coder", 0.1), ("r1-distill", None)]:
        plugin = _plugin(model=judge, analysis_models=["k2"])
        assert resolve_policy(cfg, None, plugin,
                              _request(plugins=[plugin])).analysis_frequency_penalty == penalty


def test_a_judge_default_out_of_range_fails_at_load_naming_the_key():
    with pytest.raises(ConfigError) as err:
        _judge_defaults(3.0)
    assert err.value.paths == ["models[0].fusion_judge.analysis_frequency_penalty"]


def test_plugin_panel_drops_overrides_for_members_that_left(cfg):
    plugin = _plugin(analysis_models=["qwen-72b", "k2"])
    policy = resolve_policy(cfg, cfg.decision("panel"), plugin, _request(plugins=[plugin]))
    assert policy.analysis_overrides == []


def test_no_decision_and_panel_override_builds_fusion_direct(cfg):
    plugin = _plugin(analysis_models=["qwen-72b", "coder"])
    policy = resolve_policy(cfg, None, plugin, _request(plugins=[plugin]))
    assert policy.decision == "fusion_direct"
    assert policy.panel == ("qwen-72b", "coder") and policy.judge == "qwen-72b"
    assert policy.output_contract is None


def test_non_fusion_decision_is_not_eligible(cfg):
    plugin = _plugin(analysis_models=["coder"])
    policy = resolve_policy(cfg, cfg.decision("general_chat"), plugin, _request(plugins=[plugin]))
    assert policy.decision == "fusion_direct"
    with pytest.raises(InvalidRequest) as info:
        resolve_policy(cfg, cfg.decision("general_chat"), None, _request())
    assert info.value.message == EXACT_400


@pytest.mark.parametrize("plugin", [None, {"id": "fusion", "model": "k2"}])
def test_no_eligible_decision_gives_the_exact_400(cfg, plugin):
    request = _request(plugins=[plugin] if plugin else None)
    with pytest.raises(InvalidRequest) as info:
        resolve_policy(cfg, None, plugin, request)
    assert info.value.status == 400
    assert info.value.body()["error"]["message"] == EXACT_400
    assert info.value.body()["error"]["type"] == "invalid_request_error"


def test_no_eligible_decision_error_body():
    err = no_eligible_decision_error("vllm-sr/fusion")
    assert isinstance(err, InvalidRequest) and err.status == 400
    assert err.body() == {"error": {"message": EXACT_400, "type": "invalid_request_error",
                                    "param": "model", "code": "fusion_no_eligible_decision"}}


@pytest.mark.parametrize("field,value,param", [
    ("model", "vllm-sr/fusion", "plugins[0].model"),
    ("analysis_models", ["qwen-72b", "vllm-sr/fusion"], "plugins[0].analysis_models[1]"),
    ("model", "vllm-sr/auto", "plugins[0].model"),
])
def test_recursion_guard_per_request(cfg, field, value, param):
    plugin = _plugin(**{field: value})
    with pytest.raises(InvalidRequest) as info:
        resolve_policy(cfg, cfg.decision("panel"), plugin, _request(plugins=[plugin]))
    assert info.value.param == param and "recursive" in info.value.message


def test_unknown_and_embedding_models_are_rejected_per_request(cfg):
    for panel in (["gpt-9"], ["bge-m3"]):
        plugin = _plugin(analysis_models=panel)
        with pytest.raises(InvalidRequest) as info:
            resolve_policy(cfg, None, plugin, _request(plugins=[plugin]))
        assert info.value.param == "plugins[0].analysis_models[0]"


@pytest.mark.parametrize("plugin,param", [
    ({"id": "fusion", "analysis_template": "x"}, "plugins[0].analysis_template"),
    ({"id": "fusion", "on_error": "retry"}, "plugins[0].on_error"),
    ({"id": "fusion", "max_concurrent": 0}, "plugins[0].max_concurrent"),
    ({"id": "fusion", "analysis_frequency_penalty": 2.5}, "plugins[0].analysis_frequency_penalty"),
    ({"id": "fusion", "analysis_models": []}, "plugins[0].analysis_models"),
    ({"id": "fusion", "min_successful_responses": 4}, "plugins[0].min_successful_responses"),
    ({"id": "fusion", "analysis_overrides": [{"model": "k2", "temperature": 0.1}]},
     "plugins[0].analysis_overrides[0].model"),
])
def test_bad_overrides_are_400_naming_the_field(cfg, plugin, param):
    with pytest.raises(InvalidRequest) as info:
        resolve_policy(cfg, cfg.decision("panel"), plugin, _request(plugins=[plugin]))
    assert info.value.status == 400 and info.value.param == param


def test_override_cannot_shrink_panel_below_the_decision_quorum():
    cfg = make_config(fusion_decision(min_successful_responses=3))
    plugin = _plugin(analysis_models=["qwen-72b", "coder"])
    with pytest.raises(InvalidRequest) as info:
        resolve_policy(cfg, cfg.decision("panel"), plugin, _request(plugins=[plugin]))
    assert "min_successful_responses" in info.value.message and info.value.param == "plugins[0]"


def test_override_mode_conflicting_with_decision_analysis_template():
    cfg = make_config(fusion_decision(analysis_template="compare {{responses}}"))
    plugin = _plugin(analysis_mode="one_call")
    with pytest.raises(InvalidRequest) as info:
        resolve_policy(cfg, cfg.decision("panel"), plugin, _request(plugins=[plugin]))
    assert "analysis_template" in info.value.message
