"""vLLM model deployments, built with ``ray.serve.llm`` from a profile's model settings.

Chat templating, sampling, tokenisation and the OpenAI protocol are vLLM's and
``ray.serve.llm``'s; this module only translates :class:`ModelSettings` into an ``LLMConfig``
and Serve deployment options.
"""

from __future__ import annotations

from typing import Any

from serve_app.config.models import ModelSettings

from serve_app.autoscaling.options import scaling_options

from .model_assets import resolve_model_path
from .vllm_callbacks import CALLBACK_CLASS


def served_model_name(model: ModelSettings) -> str:
    return model.engine.served_model_name or model.alias


def engine_kwargs(model: ModelSettings) -> dict[str, Any]:
    e = model.engine
    kwargs: dict[str, Any] = {
        "tensor_parallel_size": e.tensor_parallel_size,
        "pipeline_parallel_size": e.pipeline_parallel_size,
        "max_model_len": e.max_model_len,
        "dtype": e.dtype,
        "enforce_eager": e.enforce_eager,
        "gpu_memory_utilization": e.gpu_memory_utilization,
    }
    if e.quantization:
        kwargs["quantization"] = e.quantization
    if e.max_num_seqs:
        kwargs["max_num_seqs"] = e.max_num_seqs
    if e.limit_mm_per_prompt:
        kwargs["limit_mm_per_prompt"] = dict(e.limit_mm_per_prompt)
    kwargs.update(e.engine_kwargs)
    return kwargs


def _server_cls() -> type:
    from .llm_server import HorizonLLMServer

    return HorizonLLMServer


def build_llm_config(model: ModelSettings, *, use_gpu: bool):
    from ray.serve.llm import LLMConfig

    from .placement import cpu_llm_placement, llm_placement

    placement = llm_placement(model) if use_gpu else cpu_llm_placement(model)
    env = dict(model.engine.env)
    kwargs: dict[str, Any] = dict(
        model_loading_config={"model_id": served_model_name(model),
                              "model_source": resolve_model_path(model.engine.model)},
        engine_kwargs=engine_kwargs(model),
        # Replicas, admission bounds and autoscaling set explicitly: ray.serve.llm defaults
        # target_ongoing_requests to an effectively infinite value (autoscaling silently off).
        deployment_config={**scaling_options(model), **placement.pop("deployment_config", {})},
        runtime_env={"env_vars": env} if env else None,
        log_engine_metrics=True,
        # LLMServer plus record_autoscaling_stats: the engine's waiting/running counts reach
        # the queue-depth policy (deployments/llm_server.py).
        server_cls=_server_cls(),
        # Skips the per-node model download task when the model is a local directory.
        callback_config={"callback_class": CALLBACK_CLASS},
    )
    kwargs.update(placement)
    if not use_gpu:
        kwargs["accelerator_config"] = {"kind": "cpu"}
    return LLMConfig(**kwargs)


def build_vllm_deployment(model: ModelSettings, *, use_gpu: bool, name: str):
    """The Serve application node of one vLLM model (an ``LLMServer`` deployment)."""
    from ray.serve.llm import build_llm_deployment

    return build_llm_deployment(build_llm_config(model, use_gpu=use_gpu),
                                override_serve_options={"name": name})
