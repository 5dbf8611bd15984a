"""A single-worker vLLM engine keeps its model runner in the engine-core process on CPU, where
``ray.serve.llm`` would give it a worker process of its own (deployments/vllm_server.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from serve_app.config.loader import load_config


def _config(world_size: int, backend: str):
    parallel = SimpleNamespace(world_size=world_size, distributed_executor_backend=backend)
    return SimpleNamespace(distributed_executor_backend=backend), SimpleNamespace(parallel_config=parallel)


@pytest.mark.parametrize("world_size,backend,kept", [
    (1, "mp", False),      # ray.serve.llm's CPU choice for one worker: moved into the engine core
    (2, "mp", True),       # tensor parallel on CPU: its workers stay processes
    (1, "ray", True),      # GPU profiles: Ray's executor and its placement group stay
    (4, "ray", True),
])
def test_only_a_single_mp_worker_moves_into_the_engine_core(world_size, backend, kept):
    from deployments.vllm_server import model_runner_in_engine_core

    args, config = _config(world_size, backend)
    assert model_runner_in_engine_core(args, config) is not kept
    expected = backend if kept else "uni"
    assert config.parallel_config.distributed_executor_backend == expected
    assert args.distributed_executor_backend == expected


def test_the_embedded_defaults_engine_config_from_ray_serve_llm_gets_the_uni_executor():
    """The real path: ray.serve.llm builds vLLM's config for configs/local.yaml's k2 (``mp``
    on CPU), then the engine class the deployment uses turns it to ``uni``."""
    from ray.llm._internal.serve.engines.vllm.vllm_engine import _get_vllm_engine_config

    from deployments.vllm_server import HorizonLLMServer, HorizonVLLMEngine, model_runner_in_engine_core
    from serve_app.fleet.backends.vllm import build_llm_config

    llm_config = build_llm_config(load_config("configs/local.yaml").model("k2"), {})
    engine_args, vllm_config = _get_vllm_engine_config(llm_config)
    assert vllm_config.parallel_config.distributed_executor_backend == "mp"
    assert model_runner_in_engine_core(engine_args, vllm_config)
    assert vllm_config.parallel_config.distributed_executor_backend == "uni"
    assert HorizonLLMServer._get_default_engine_class(None) is HorizonVLLMEngine
    # The two Ray hooks it relies on (internals): still there, still overridden.
    from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
    from ray.serve.llm import LLMServer

    assert "_prepare_engine_config" in vars(VLLMEngine) and "_prepare_engine_config" in vars(HorizonVLLMEngine)
    assert any("_get_default_engine_class" in vars(base) for base in LLMServer.__mro__)
