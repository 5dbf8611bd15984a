"""`engine_kwargs` keys and number values are checked at load against the installed vLLM.

A misspelled key (``gpu_memory_utilisation``) passed `horizon validate`; `horizon serve` then
started Ray and failed building the application with ray.serve.llm's "Unknown engine argument"
in a page of traceback, naming no profile key. A number argument given a word failed the
engine's start a minute in.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from serve_app.config.loader import ConfigError, horizon_args, parse_config, read_document
from serve_app.fleet.backends.vllm import build_llm_config
from serve_app.fleet.backends.vllm_source import engine_arguments


def _k2(document: dict) -> dict:
    return next(m for m in horizon_args(document)["models"] if m["alias"] == "k2")


def _load(tmp_path, document: dict):
    """``document`` loaded as the commands load a profile file."""
    from serve_app.tools.serve_config import load_serve_profile

    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return load_serve_profile(str(path))


def _load_with(tmp_path, **kwargs):
    document = read_document("configs/local.yaml")
    _k2(document)["engine"].setdefault("engine_kwargs", {}).update(kwargs)
    return _load(tmp_path, document), document


def test_the_names_read_without_importing_vllm_are_the_arguments_ray_serve_llm_takes():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    names = {f.name for f in dataclasses.fields(AsyncEngineArgs)} | {f.name for f in dataclasses.fields(FrontendArgs)}
    assert set(engine_arguments()) == names
    assert engine_arguments()["max_num_batched_tokens"] == "int | None"


def test_a_misspelled_engine_argument_fails_at_load_naming_the_key_and_the_right_spelling(tmp_path):
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig

    from serve_app.app import build_app

    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, gpu_memory_utilisation=0.5)
    assert err.value.paths == ["models[0].engine.engine_kwargs.gpu_memory_utilisation"]
    assert "did you mean 'gpu_memory_utilization'?" in str(err.value)
    # `serve run` builds the app from the same profile: refused there too, before any replica.
    document = read_document("configs/local.yaml")
    _k2(document)["engine"]["engine_kwargs"]["gpu_memory_utilisation"] = 0.5
    with pytest.raises(ConfigError) as err:
        build_app(dict(horizon_args(document)))
    assert err.value.paths == ["models[0].engine.engine_kwargs.gpu_memory_utilisation"]
    # What ray.serve.llm would have said once Ray was up: the check agrees with it.
    config = parse_config(dict(horizon_args(read_document("configs/local.yaml"))))
    llm = build_llm_config(config.model("k2"), {})
    llm.engine_kwargs["gpu_memory_utilisation"] = 0.5
    with pytest.raises(ValueError, match="Unknown engine argument: gpu_memory_utilisation"):
        VLLMEngineConfig.from_llm_config(llm)


@pytest.mark.parametrize("key, value", [("max_num_batched_tokens", "lots"), ("max_num_batched_tokens", True),
                                        ("max_num_batched_tokens", 2.5), ("cpu_offload_gb", "most"),
                                        ("max_cudagraph_capture_size", "2k")])
def test_a_number_argument_given_something_else_fails_at_load(tmp_path, key, value):
    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, **{key: value})
    assert err.value.paths == [f"models[0].engine.engine_kwargs.{key}"]
    assert "expected a number" in str(err.value)


@pytest.mark.parametrize("key, value", [("max_num_batched_tokens", 8), ("max_num_batched_tokens", "8"),
                                        ("cpu_offload_gb", 1), ("max_num_batched_tokens", "4096"),
                                        ("seed", 0), ("trust_remote_code", True)])
def test_values_vllm_takes_pass(tmp_path, key, value):
    cfg, _ = _load_with(tmp_path, **{key: value})
    assert cfg.model("k2").engine.engine_kwargs[key] == value


@pytest.mark.parametrize("key, value, setting", [
    ("tensor_parallel_size", 2, "engine.tensor_parallel_size"),     # placement counted one worker
    ("max_model_len", 8192, "engine.max_model_len"),                 # the context checks read 2048
    ("tool_call_parser", "hermes", "tool_calling.parser"),           # tool routing reads the section
    ("chat_template", "{{ messages }}", "chat_template.file"),
])
def test_a_vllm_argument_the_profile_sets_itself_is_refused_in_engine_kwargs(tmp_path, key, value, setting):
    # engine_kwargs is applied last and would win in vLLM, while the gateway and the planner
    # go on reading the profile's own setting.
    with pytest.raises(ConfigError) as err:
        _load_with(tmp_path, **{key: value})
    assert err.value.paths == [f"models[0].engine.engine_kwargs.{key}"]
    assert f"set it as {setting}" in str(err.value)


def test_engine_kwargs_on_an_embedding_model_are_refused_not_ignored(tmp_path):
    document = read_document("configs/local.yaml")
    embedder = next(m for m in horizon_args(document)["models"] if m["alias"] == "bge-m3")
    embedder["engine"]["engine_kwargs"] = {"use_fp16": True}
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, document)
    index = horizon_args(document)["models"].index(embedder)
    assert err.value.paths == [f"models[{index}].engine.engine_kwargs"]
    assert "its settings are under embedding" in str(err.value)


def test_a_vllm_whose_files_are_laid_out_otherwise_is_not_checked(monkeypatch, tmp_path):
    # A later vLLM that moves FrontendArgs must not turn every frontend key into "unknown".
    import ast

    from serve_app.fleet.backends import vllm_source

    engine_only = ast.parse("class EngineArgs:\n    model: str = ''\nclass AsyncEngineArgs(EngineArgs):\n    x: int = 1\n")
    monkeypatch.setattr(vllm_source, "_module",
                        lambda relative: engine_only if relative == "engine/arg_utils.py" else ast.parse(""))
    vllm_source.engine_arguments.cache_clear()
    try:
        assert vllm_source.engine_arguments() is None
        cfg, _ = _load_with(tmp_path, not_a_vllm_argument=1)   # nothing to compare against: accepted
        assert cfg.model("k2").engine.engine_kwargs["not_a_vllm_argument"] == 1
    finally:
        vllm_source.engine_arguments.cache_clear()
