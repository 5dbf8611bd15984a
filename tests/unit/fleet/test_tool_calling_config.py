"""Tool calling and chat templates per model: the profile's typed settings, what the vLLM
backend hands ray.serve.llm (vLLM frontend arguments), and `horizon validate` refusing a profile
whose decisions send tool requests to a model without tool calling."""

from __future__ import annotations

import copy

import pytest
import yaml

from serve_app.config.loader import ConfigError, horizon_args, load_config, parse_config, read_document
from serve_app.fleet.backends.vllm import build_llm_config, engine_kwargs, frontend_kwargs


def local_doc() -> dict:
    return copy.deepcopy(dict(horizon_args(read_document("configs/local.yaml"))))


def fleet_doc() -> dict:
    return copy.deepcopy(dict(horizon_args(read_document("configs/fleet.yaml"))))


def entry(doc: dict, alias: str) -> dict:
    return next(m for m in doc["models"] if m["alias"] == alias)


def test_local_engine_gets_the_hermes_parser_and_the_tools_template():
    cfg = load_config("configs/local.yaml")
    kwargs = frontend_kwargs(cfg.model("k2"))
    assert kwargs["tool_call_parser"] == "hermes"
    assert kwargs["enable_auto_tool_choice"] is True      # vLLM loads no parser without it
    assert kwargs["tool_strict_level"] == "parameter"     # arguments pinned to the schema
    # The template travels as text (a replica on another node needs no file).
    assert "<tools>" in kwargs["chat_template"] and "{%" in kwargs["chat_template"]
    assert kwargs["default_chat_template_kwargs"]["default_system"].startswith("You are a helpful AI")
    assert kwargs["chat_template_content_format"] == "string"
    assert engine_kwargs(cfg.model("k2"))["tool_call_parser"] == "hermes"
    # Aliases sharing the engine have its tool calling.
    assert cfg.tool_calling("qwen-72b") is cfg.model("k2").tool_calling
    assert cfg.tool_calling("bge-m3") is None


def test_ray_serve_llm_passes_them_as_frontend_arguments():
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig

    cfg = load_config("configs/local.yaml")
    engine = VLLMEngineConfig.from_llm_config(build_llm_config(cfg.model("k2"), {}))
    assert engine.frontend_kwargs["tool_call_parser"] == "hermes"
    assert engine.frontend_kwargs["enable_auto_tool_choice"] is True
    assert "chat_template" in engine.frontend_kwargs and "tool_call_parser" not in engine.engine_kwargs


def test_a_model_without_the_section_passes_no_tool_arguments():
    doc = local_doc()
    del entry(doc, "k2")["tool_calling"], entry(doc, "k2")["chat_template"]
    for d in doc["routing"]["decisions"]:
        d["tool_requests"] = "refuse"
    kwargs = frontend_kwargs(parse_config(doc).model("k2"))
    assert kwargs == {}


def test_every_fleet_parser_is_one_vllm_registers():
    from vllm.tool_parsers import ToolParserManager

    cfg = load_config("configs/fleet.yaml")
    parsers = {m.alias: m.tool_calling.parser for m in cfg.models if m.backend == "vllm"}
    assert parsers == {"k2": "k2_horizon", "qwen-72b": "hermes", "r1-distill": "deepseek_v3",
                       "coder": "hermes", "minicpm-v": "hermes"}
    assert set(parsers.values()) <= set(ToolParserManager.list_registered())
    for alias in ("r1-distill", "minicpm-v"):
        assert frontend_kwargs(cfg.model(alias))["chat_template"].strip()


def test_the_parser_names_read_without_importing_vllm_are_the_ones_it_registers():
    from vllm.tool_parsers import ToolParserManager

    from serve_app.fleet.backends.vllm_source import tool_parser_names

    assert tool_parser_names() == frozenset(ToolParserManager.list_registered())


def test_a_parser_vllm_does_not_have_fails_at_load_naming_the_key(tmp_path):
    # It failed the engine's start about a minute in, after the weights loaded.
    from serve_app.app import build_app
    from serve_app.tools.serve_config import load_serve_profile

    document = read_document("configs/local.yaml")
    entry(horizon_args(document), "k2")["tool_calling"]["parser"] = "hermess"
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_serve_profile(str(path))
    assert err.value.paths == ["models[0].tool_calling.parser"]
    assert "'hermess' is not a tool-call parser of the installed vLLM" in str(err.value)
    assert "hermes," in str(err.value)  # the names it has
    with pytest.raises(ConfigError) as err:
        build_app(dict(horizon_args(document)))
    assert err.value.paths == ["models[0].tool_calling.parser"]


def test_the_r1_template_lists_tools_and_renders_calls_in_deepseek_tokens():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(open("configs/templates/deepseek_r1_tools.jinja").read())
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                               "parameters": {"type": "object"}}}]
    text = template.render(tools=tools, add_generation_prompt=True, messages=[
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])
    assert "### get_weather" in text
    assert '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```' in text
    assert "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁outputs▁end｜>" in text
    assert text.endswith("<｜Assistant｜><think>\n")


# ------------------------------------------------------------------ validation
def test_validate_refuses_a_decision_routing_tools_to_a_model_without_them():
    doc = local_doc()
    del entry(doc, "k2")["tool_calling"]
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    message = str(err.value)
    assert "routing.decisions[2].modelRefs[0].model" in message       # complex_reasoning -> k2
    assert "routes requests with tools to 'k2'" in message and "models[0].tool_calling" in message
    assert "tool_requests: refuse" in message


def test_the_fallback_chain_and_the_fusion_judge_count_too():
    doc = fleet_doc()
    del entry(doc, "k2")["tool_calling"]
    for d in doc["routing"]["decisions"]:
        if d["modelRefs"][0]["model"] == "k2":
            d["tool_requests"] = "refuse"
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    # reasoning -> r1-distill is fine, but its chain [r1-distill, k2, qwen-72b] reaches k2.
    assert "resilience.fallback_chains" in str(err.value) and "'k2'" in str(err.value)

    doc = local_doc()
    del entry(doc, "k2")["tool_calling"]
    for d in doc["routing"]["decisions"]:
        if d.get("algorithm", {}).get("type") != "fusion":
            d["tool_requests"] = "refuse"
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert "its Fusion judge" in str(err.value) and "algorithm.fusion.model" in str(err.value)


def test_refusing_decisions_and_refusals_need_no_tool_model():
    doc = local_doc()
    del entry(doc, "k2")["tool_calling"]
    for d in doc["routing"]["decisions"]:
        d["tool_requests"] = "refuse"
    cfg = parse_config(doc)
    assert cfg.tool_calling("k2") is None
    assert not cfg.decision("general_chat").routes_tool_requests
    assert not cfg.decision("safety_refusal").routes_tool_requests


def test_tool_settings_belong_to_the_engine_owner_and_need_a_parser():
    doc = local_doc()
    entry(doc, "qwen-72b")["tool_calling"] = {"parser": "hermes"}
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert "models[1].tool_calling" in str(err.value) and "declare tool_calling on 'k2'" in str(err.value)

    doc = local_doc()
    entry(doc, "k2")["tool_calling"] = {"strict_level": "function"}
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert "models[0].tool_calling.parser" in str(err.value)

    doc = local_doc()
    entry(doc, "k2")["chat_template"]["file"] = "configs/templates/nope.jinja"
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert "models[0].chat_template.file" in str(err.value) and "not found" in str(err.value)


def test_a_simulated_engine_honours_tools_without_the_section():
    cfg = load_config("configs/sim.yaml")
    assert all(cfg.tool_calling(m.alias) is not None for m in cfg.models if m.role != "embedding")


def test_the_chatml_template_lists_tools_in_hermes_format_and_keeps_the_history():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(open("configs/templates/chatml_tools.jinja").read())
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    text = template.render(tools=tools, add_generation_prompt=True, default_system="You are Smol.", messages=[
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])
    assert text.startswith("<|im_start|>system\nYou are Smol.\n\n# Tools")
    assert "<tools>\n{" in text and '"name": "get_weather"' in text.split("\n</tools>")[0]
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
    plain = template.render(messages=[{"role": "system", "content": "Be brief"}, {"role": "user", "content": "hi"}],
                            add_generation_prompt=True)
    assert plain == "<|im_start|>system\nBe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
