"""``observability.access_log`` reaches Ray Serve's logging config of every deployment the app
builds, and the default leaves Serve's (and the operator's application-level) logging alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray.serve.schema import LoggingConfig

from serve_app.app import build_app
from serve_app.config.loader import ConfigError, horizon_args, parse_config, read_document

ROOT = Path(__file__).resolve().parents[3]


def sim_args(**observability: Any) -> dict[str, Any]:
    args = dict(horizon_args(read_document(ROOT / "configs" / "sim.yaml")))
    args["observability"] = {**args.get("observability", {}), **observability}
    return args


def deployments(app: Any) -> dict[str, Any]:
    """The ingress and the model deployments it was bound with, by name."""
    ingress = app._bound_deployment
    handles = ingress.init_args[1]
    return {ingress.name: ingress, **{a._bound_deployment.name: a._bound_deployment for a in handles.values()}}


def as_logging_config(value: Any) -> LoggingConfig | None:
    """Serve keeps a deployment's ``logging_config`` as given: a dict or a LoggingConfig."""
    return LoggingConfig(**value) if isinstance(value, dict) else value


def test_default_sets_no_logging_config_so_the_applications_applies():
    built = deployments(build_app(sim_args()))
    assert len(built) >= 3
    assert {name: d.logging_config for name, d in built.items()} == {name: None for name in built}


def test_access_log_off_reaches_every_deployment_with_the_profiles_level():
    built = deployments(build_app(sim_args(access_log=False, log_level="WARNING")))
    for name, deployment in built.items():
        config = as_logging_config(deployment.logging_config)
        assert config is not None, name
        assert (config.enable_access_log, config.log_level) == (False, "WARNING"), name


@pytest.mark.parametrize("log_format,encoding", [("json", "JSON"), ("text", "TEXT")])
def test_log_format_is_serves_encoding_in_every_deployment(log_format, encoding):
    """Serve formats our lines in a replica too (serve_app.observability.logging), so the
    profile's format is Serve's encoding, with the access log and level kept."""
    built = deployments(build_app(sim_args(log_format=log_format, log_level="DEBUG")))
    for name, deployment in built.items():
        config = as_logging_config(deployment.logging_config)
        assert config is not None, name
        assert (config.encoding, config.enable_access_log, config.log_level) == (encoding, True, "DEBUG"), name


def test_log_format_must_be_json_or_text_and_the_error_names_the_key():
    with pytest.raises(ConfigError, match=r"observability\.log_format"):
        parse_config(sim_args(log_format="xml"))


def test_access_log_must_be_a_boolean_and_the_error_names_the_key():
    with pytest.raises(ConfigError, match=r"observability\.access_log"):
        parse_config(sim_args(access_log="sometimes"))


def test_vllm_deployment_carries_the_logging_config_into_ray_serve_llm(monkeypatch):
    """The vLLM backend hands the options to ray.serve.llm's ``deployment_config``; Serve's
    options for the LLM server must keep ``enable_access_log: False``."""
    import ray
    from ray.serve.llm import LLMServer

    from serve_app.config.loader import load_config
    from serve_app.fleet.backends.vllm import build_llm_config
    from serve_app.observability.logging import serve_logging_options

    class _Ctx:
        runtime_env: dict = {}

    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Ctx())
    cfg = load_config(ROOT / "configs" / "local.yaml")
    off = serve_logging_options(cfg.observability.model_copy(update={"access_log": False}))
    options = LLMServer.get_deployment_options(build_llm_config(cfg.model("k2"), off))
    assert as_logging_config(options["logging_config"]).enable_access_log is False
    assert "logging_config" not in LLMServer.get_deployment_options(build_llm_config(cfg.model("k2"), {}))


def test_vllm_deployments_log_without_colour_unless_the_operator_says_otherwise():
    """vLLM colours its lines when its stream looks like a terminal, and Serve's stdout redirect
    in a replica does: every vLLM deployment's environment turns the colour off; an operator's
    own ``engine.env`` still decides, and its other variables pass through."""
    from serve_app.config.loader import load_config
    from serve_app.fleet.backends.vllm import build_llm_config

    k2 = load_config(ROOT / "configs" / "local.yaml").model("k2")
    assert build_llm_config(k2, {}).runtime_env["env_vars"]["VLLM_LOGGING_COLOR"] == "0"
    own = k2.model_copy(deep=True)
    own.engine.env = {"VLLM_LOGGING_COLOR": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env = build_llm_config(own, {}).runtime_env["env_vars"]
    assert env["VLLM_LOGGING_COLOR"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
