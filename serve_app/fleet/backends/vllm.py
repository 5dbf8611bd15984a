"""vLLM as a fleet backend, through ``ray.serve.llm``.

Chat templating, sampling, tokenisation and the OpenAI protocol are vLLM's and
``ray.serve.llm``'s; this module translates a profile's :class:`ModelSettings` into an
``LLMConfig`` (engine arguments, placement, replicas) and talks to the resulting ``LLMServer``
deployment (:mod:`deployments.vllm_server`) with vLLM's own request objects.

Placement: one placement-group bundle per engine worker (``tensor_parallel_size x
pipeline_parallel_size``). On GPU, ``ray.serve.llm`` adds one CPU for the replica actor to the
first bundle. On CPU the engine core and its worker are child processes of the replica actor
(vLLM's multiprocessing executor), so the replica actor asks for no CPU of its own and runs
inside the engine's bundle: ``placement.num_cpus`` is the whole engine's reservation (its
default would take two logical CPUs for one engine and leave nothing else schedulable on a
2-core machine).
"""

from __future__ import annotations

import difflib
from typing import Any, AsyncIterator, Optional

from deployments.model_assets import build_smollm2, resolve_model_path
from deployments.vllm_callbacks import CALLBACK_CLASS

from ...config.models import ModelSettings, resolve_profile_path
from ...messages.chunks import Chunk
from ...config.schema import HorizonConfig
from ...errors import HorizonError, UpstreamError
from ..availability import DeploymentBoard
from ..errors import engine_error
from ..deployment_client import DeploymentClient
from .base import Backend, worker_bundle
from .vllm_source import engine_arguments, tool_parser_names

GIB = 1024 ** 3
# vLLM's legacy CPU setting for the KV cache's size, in GiB; when set it wins over
# engine_kwargs.kv_cache_memory_bytes (vllm.platforms.cpu).
CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"


def served_model_name(model: ModelSettings) -> str:
    return model.engine.served_model_name or model.alias


def engine_kwargs(model: ModelSettings, frontend: bool = True) -> dict[str, Any]:
    """The model's vLLM arguments; ``frontend``: with the OpenAI server's (tool parser, chat
    template), which an in-process ``vllm.LLM`` does not accept."""
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
    if frontend:
        kwargs.update(frontend_kwargs(model))
    kwargs.update(e.engine_kwargs)
    return kwargs


def frontend_kwargs(model: ModelSettings) -> dict[str, Any]:
    """vLLM frontend arguments of the model's tool calling and chat template.

    ``ray.serve.llm`` splits ``engine_kwargs`` by name into vLLM's ``FrontendArgs`` (the OpenAI
    server: parsers, templates) and ``AsyncEngineArgs`` (the engine), so they travel together.
    A template file is read here, where the graph is built, and passed as text: a replica on
    another node needs no copy of the file (vLLM takes a string with Jinja syntax as the
    template itself).
    """
    out: dict[str, Any] = {}
    tools = model.tool_calling
    if tools is not None:
        out["tool_call_parser"] = tools.parser
        # vLLM loads no parser at all without it (required and named need one too).
        out["enable_auto_tool_choice"] = True
        out["tool_strict_level"] = tools.strict_level
    template = model.chat_template
    if template is not None:
        if template.file:
            path = resolve_profile_path(template.file)
            if path is None:
                raise FileNotFoundError(f"chat template {template.file!r} of model {model.alias!r}")
            out["chat_template"] = path.read_text(encoding="utf-8")
        if template.kwargs:
            out["default_chat_template_kwargs"] = dict(template.kwargs)
        out["chat_template_content_format"] = template.content_format
    return out


def uses_gpu(model: ModelSettings) -> bool:
    return model.placement.num_gpus > 0


def llm_placement(model: ModelSettings) -> dict[str, Any]:
    """The ``LLMConfig`` keyword arguments that carry placement (GPU or CPU).

    ``placement_group_config`` lists one bundle per engine worker; a fractional GPU bundle makes
    ray.serve.llm set ``VLLM_RAY_PER_WORKER_GPUS`` so vLLM shares the card. ``accelerator_type``
    makes ray.serve.llm add its accelerator hint to every bundle; it must be a type Ray knows
    (the planner checks). Node labels cannot be expressed in an LLM placement group: pin LLMs
    with custom ``resources``. On CPU, ``deployment_config`` puts the replica actor inside the
    engine's bundle (see the module docstring).
    """
    bundle = worker_bundle(model)
    if not uses_gpu(model) and model.placement.memory_gb:
        bundle["memory"] = int(model.placement.memory_gb * 1e9)
    kwargs: dict[str, Any] = {
        "placement_group_config": {"bundles": [dict(bundle) for _ in range(BACKEND.workers(model))],
                                   "strategy": model.placement.placement_group_strategy},
    }
    if uses_gpu(model):
        if model.placement.accelerator_type:
            kwargs["accelerator_type"] = model.placement.accelerator_type
    else:
        kwargs["accelerator_config"] = {"kind": "cpu"}
        kwargs["deployment_config"] = {"ray_actor_options": {"num_cpus": 0}}
    return kwargs


def build_llm_config(model: ModelSettings, scaling: dict[str, Any]) -> Any:
    # Imported here: ray.serve.llm imports vLLM (~20 s on two cores); the ingress replica uses
    # this module's client and never builds a config.
    from ray.serve.llm import LLMConfig

    from deployments.vllm_server import HorizonLLMServer

    placement = llm_placement(model)
    # vLLM colours its log lines when its stream looks like a terminal, and Serve's stdout
    # redirect in the replica does: escape codes in every line of the replica's log file.
    env = {"VLLM_LOGGING_COLOR": "0", **model.engine.env}
    kwargs: dict[str, Any] = dict(
        model_loading_config={"model_id": served_model_name(model),
                              "model_source": resolve_model_path(model.engine.model)},
        engine_kwargs=engine_kwargs(model),
        # Replicas, admission bounds and autoscaling set explicitly: ray.serve.llm defaults
        # target_ongoing_requests to an effectively infinite value (autoscaling silently off).
        deployment_config={**scaling, **placement.pop("deployment_config", {})},
        runtime_env={"env_vars": env} if env else None,
        log_engine_metrics=True,
        # LLMServer plus record_autoscaling_stats and a warm-up (deployments/vllm_server.py).
        server_cls=HorizonLLMServer,
        # Skips the per-node model download task when the model is a local directory.
        callback_config={"callback_class": CALLBACK_CLASS},
        **placement,
    )
    return LLMConfig(**kwargs)


class VllmHandleClient(DeploymentClient):
    """Client of a ``ray.serve.llm`` LLMServer deployment."""

    def __init__(self, alias: str, handle: Any, served_name: str, deployment: str = "",
                 board: Optional[DeploymentBoard] = None):
        super().__init__(alias, deployment, board)
        self.served_name = served_name
        self._handle = handle.options(stream=True)

    def _request(self, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        # A plain body: the vLLM replica builds vLLM's request object (HorizonLLMServer.chat_body),
        # so the gateway never imports vLLM.
        payload = dict(body)
        payload["model"] = self.served_name
        payload["stream"] = stream
        if stream:
            # Always ask the engine for usage; the ingress drops it if the client did not ask.
            payload["stream_options"] = {"include_usage": True}
        return payload

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._complete(request, text=False)

    async def complete_text(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._complete(request, text=True)

    def stream(self, request: dict[str, Any]) -> AsyncIterator[Chunk]:
        return self._stream(request, text=False)

    def stream_text(self, request: dict[str, Any]) -> AsyncIterator[Chunk]:
        return self._stream(request, text=True)

    def _call(self, request: dict[str, Any], stream: bool, text: bool):
        method = self._handle.completions_body if text else self._handle.chat_body
        return method.remote(self._request(request, stream=stream))

    async def _complete(self, request: dict[str, Any], text: bool) -> dict[str, Any]:
        self.check_up()
        gen = self._call(request, stream=False, text=text)
        try:
            async for item in gen:
                if _is_error(item):
                    raise engine_error(self.alias, item)
                response = dict(item)
                response["model"] = self.alias
                return response
        except HorizonError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.failed(exc) from None
        finally:
            gen.cancel()
        raise UpstreamError(f"model {self.alias!r} returned no response")

    async def _stream(self, request: dict[str, Any], text: bool) -> AsyncIterator[Chunk]:
        """The engine's chunks as it wrote them (SSE events of JSON text), not parsed: only the
        served name is swapped for the alias when they differ (an alias sharing an engine)."""
        self.check_up()
        gen = self._call(request, stream=True, text=text)
        served, alias = f'"model":"{self.served_name}"', f'"model":"{self.alias}"'
        try:
            async for batch in gen:
                items = batch if isinstance(batch, list) else [batch]
                for item in items:
                    if not isinstance(item, str):
                        if _is_error(item):
                            raise engine_error(self.alias, item)
                        continue
                    for line in item.split("\n"):
                        if not line.startswith("data: "):
                            continue
                        body = line[6:].strip()
                        if body == "[DONE]":
                            continue
                        chunk = Chunk(text=body if served == alias else body.replace(served, alias, 1))
                        if chunk.is_error:
                            raise engine_error(self.alias, chunk.data)
                        yield chunk
        except HorizonError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.failed(exc) from None
        finally:
            gen.cancel()


def _is_error(item: Any) -> bool:
    """vLLM's error body, as the replica sends it: ``{"error": {...}}`` (no ``object`` key)."""
    return isinstance(item, dict) and "error" in item and "object" not in item


class VllmBackend(Backend):
    kind = "vllm"
    constrains_decoding = True
    holds_weights = True
    has_kv_cache = True
    shards_heads = True
    default_memory_gb = 2.0

    def build(self, model: ModelSettings, cfg: HorizonConfig, name: str,
              scaling: dict[str, Any]) -> Any:
        # Imported here, like LLMConfig above (vLLM's import; only the graph builder needs it).
        from ray.serve.llm import build_llm_deployment

        return build_llm_deployment(build_llm_config(model, scaling), override_serve_options={"name": name})

    def client(self, alias: str, owner: ModelSettings, handle: Any, deployment: str,
               board: Optional[DeploymentBoard]) -> VllmHandleClient:
        return VllmHandleClient(alias, handle, served_model_name(owner), deployment, board)

    def prepare(self, model: ModelSettings) -> None:
        if str(model.engine.model).startswith("local:"):
            build_smollm2()

    def workers(self, model: ModelSettings) -> int:
        return model.engine.tensor_parallel_size * model.engine.pipeline_parallel_size

    def replica_cpus(self, model: ModelSettings) -> float:
        return model.placement.num_cpus * self.workers(model) + (1.0 if uses_gpu(model) else 0.0)

    def replica_memory_gb(self, model: ModelSettings, node_memory_gb: float) -> float:
        if model.placement.memory_gb:
            return model.placement.memory_gb
        if uses_gpu(model):
            return self.default_memory_gb
        if self._takes_a_share_of_the_node(model):
            return model.engine.gpu_memory_utilization * node_memory_gb
        return self.default_memory_gb + self.kv_cache_bytes(model) / 1e9

    def _takes_a_share_of_the_node(self, model: ModelSettings) -> bool:
        """Without a KV cache size, vLLM's CPU worker reserves gpu_memory_utilization (its name
        for the share on CPU too) of the node's whole memory, and refuses to start when that
        much is not free; a profile's placement.memory_gb overrides what is counted."""
        return not model.placement.memory_gb and not uses_gpu(model) and self.kv_cache_bytes(model) is None

    def memory_note(self, model: ModelSettings) -> str:
        if not self._takes_a_share_of_the_node(model):
            return ""
        return (f"on CPU, vLLM reserves engine.gpu_memory_utilization ({model.engine.gpu_memory_utilization:g}) "
                f"of the machine's memory when no KV cache size is set: set "
                f"engine.engine_kwargs.kv_cache_memory_bytes (configs/local.yaml sets 320 MiB)")

    def kv_cache_bytes(self, model: ModelSettings) -> Optional[float]:
        """Bytes of KV cache per device the profile fixes (``kv_cache_memory_bytes``; on CPU
        ``VLLM_CPU_KVCACHE_SPACE`` first, as vLLM reads them); None when the engine sizes its cache
        from the memory it finds, or when the value is not a size (engine_problems names it)."""
        if not uses_gpu(model):
            raw = model.engine.env.get(CPU_KV_ENV)
            if raw not in (None, ""):
                gib = _whole(raw)
                return gib * GIB if gib else None
        explicit = _whole(model.engine.engine_kwargs.get("kv_cache_memory_bytes"))
        return float(explicit) if explicit else None

    def deployment_options(self, model: ModelSettings) -> dict[str, Any]:
        raise TypeError("vLLM placement is carried by the LLMConfig (llm_placement)")

    def gpu_memory_share(self, model: ModelSettings) -> Optional[float]:
        return model.engine.gpu_memory_utilization

    def engine_problems(self, model: ModelSettings) -> list[tuple[str, str]]:
        problems = []
        parser = model.tool_calling.parser if model.tool_calling else None
        known = tool_parser_names() if parser else None
        if parser and known is not None and parser not in known:
            # vLLM fails the replica's start on it, about a minute in, after loading the weights.
            problems.append(("tool_calling.parser", f"{parser!r} is not a tool-call parser of the installed "
                                                    f"vLLM; it has {', '.join(sorted(known))}"))
        # Sizes the planner and the machine fit count: a value that is not one would be counted
        # as nothing here and fail (or be ignored) in the engine.
        explicit = model.engine.engine_kwargs.get("kv_cache_memory_bytes")
        if explicit is not None and not _whole(explicit):
            problems.append(("engine.engine_kwargs.kv_cache_memory_bytes",
                             f"expected a whole number of bytes above 0, got {explicit!r}"))
        raw = model.engine.env.get(CPU_KV_ENV)
        if raw not in (None, "") and not _whole(raw):
            problems.append((f"engine.env.{CPU_KV_ENV}", f"expected a whole number of GiB above 0, got {raw!r}"))
        named = {key for key, _ in problems}
        return problems + [p for p in _engine_argument_problems(model.engine.engine_kwargs) if p[0] not in named]

    def placement_problems(self, model: ModelSettings, on_cluster: bool) -> list[str]:
        problems = []
        if on_cluster and not uses_gpu(model):
            problems.append("a vLLM model on a GPU cluster needs placement.num_gpus > 0")
        if model.placement.accelerator_type and not _accelerator_known(model.placement.accelerator_type):
            problems.append(f"accelerator_type {model.placement.accelerator_type!r} is not one "
                            "ray.serve.llm accepts; pin the node with resources or node_labels instead")
        return problems


def _engine_argument_problems(kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """A key of ``engine_kwargs`` that is no argument of the installed vLLM, and a number
    argument given something that is not a number (vLLM's config refuses it when the engine
    starts)."""
    known = engine_arguments()
    if known is None:
        return []
    problems = []
    for key, value in kwargs.items():
        path = f"engine.engine_kwargs.{key}"
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append((path, f"not an argument of the installed vLLM's engine or OpenAI server "
                                   f"(ray.serve.llm refuses it when the application is built){hint}"))
        elif not _fits_number_annotation(known[key], value):
            problems.append((path, f"expected a number ({known[key]}), got {value!r}"))
    return problems


def _fits_number_annotation(annotation: str, value: Any) -> bool:
    """False only for a value that an ``int`` or ``float`` argument (optional or not) cannot
    take; any other annotation is left to vLLM."""
    kinds = {part.strip() for part in annotation.split("|")} - {"None"}
    if kinds not in ({"int"}, {"float"}):
        return True
    if value is None:
        return "None" in annotation
    if isinstance(value, bool):
        return False
    number = int if kinds == {"int"} else float
    if isinstance(value, (int, float)):
        return number is float or float(value).is_integer()
    try:
        number(str(value).strip())
    except ValueError:
        return False
    return True


def _whole(value: Any) -> Optional[int]:
    """``value`` as a whole number above 0 (an int, or digits in a string, as an environment
    variable is written); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value) or None
    return None


def _accelerator_known(accelerator_type: str) -> bool:
    try:
        from ray.util.accelerators import accelerators
    except ImportError:  # Ray absent (docs build): nothing to compare against
        return True
    known = {v for k, v in vars(accelerators).items() if k.isupper() and isinstance(v, str)}
    return accelerator_type in known or accelerator_type == "A10"


BACKEND = VllmBackend()

__all__ = ["BACKEND", "VllmBackend", "VllmHandleClient", "build_llm_config",
           "engine_kwargs", "llm_placement", "served_model_name"]
