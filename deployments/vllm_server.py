"""The vLLM model deployment class: ``ray.serve.llm``'s ``LLMServer`` plus the engine's queue.

Ray Serve calls ``record_autoscaling_stats`` on each replica every metrics interval and hands
the values to :class:`serve_app.autoscaling.policy.QueueDepthPolicy`; the counts come from
vLLM's scheduler through :mod:`deployments.vllm_stats`. Set as ``LLMConfig.server_cls`` of every
vLLM model deployment (``serve_app/fleet/backends/vllm.py``).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from ray._common.usage.usage_lib import usage_stats_enabled
from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
from ray.serve.llm import LLMServer
from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest

from pydantic import ValidationError

from serve_app.observability.replica_logs import (reattach_serve_logs, route_library_logs,
                                                  start_replica_logging)

from .engine_stats import engine_autoscaling_stats
from .gateway_demand import GatewayDemandReader, replica_autoscaling_stats
from .vllm_stats import latest_engine_stats

log = logging.getLogger("ray.serve")


def model_runner_in_engine_core(engine_args: Any, vllm_config: Any) -> bool:
    """Run a single-worker engine's model runner inside vLLM's engine-core process (vLLM's
    ``uni`` executor) where ``ray.serve.llm`` asked for a worker process of its own (``mp``).

    On CPU ``ray.serve.llm`` sets the ``mp`` executor whatever the engine arguments say, and
    for one worker that costs a whole process with torch loaded: measured on the embedded
    default, ≈ 0.5 GB of PSS for the same chat rate (docs/benchmarks.md, "Memory"). vLLM's own
    default for one worker is ``uni``. Several workers (tensor or pipeline parallel) keep
    theirs, and so does the ``ray`` executor of the GPU profiles. Returns whether it changed.
    """
    parallel = vllm_config.parallel_config
    if parallel.world_size != 1 or parallel.distributed_executor_backend != "mp":
        return False
    parallel.distributed_executor_backend = "uni"
    engine_args.distributed_executor_backend = "uni"
    return True


def route_vllm_logs(env: Mapping[str, str] = os.environ) -> bool:
    """vLLM's lines into the replica's log at their own level (``route_library_logs``), unless
    the operator gave vLLM a logging configuration of their own (``VLLM_LOGGING_CONFIG_PATH``
    in ``engine.env``): its handlers are theirs. Returns whether they were routed."""
    if env.get("VLLM_LOGGING_CONFIG_PATH"):
        return False
    return route_library_logs("vllm")


def apply_vllm_logging(env: Mapping[str, str] = os.environ) -> bool:
    """Apply vLLM's own logging setup now, before the engine starts, then give Serve's log its
    file back and route vLLM's lines (:func:`route_vllm_logs`). Returns whether they were routed.

    vLLM applies a setup once per process: its engine start asks for the same one again
    (``configure_logging_if_needed``) and skips it, so the routing holds from the engine's first
    line on, and the dictConfig that closes every handler of the process runs here, where the
    log is given back at once. An engine whose arguments ask for another setup (``log_level``)
    gets it applied by vLLM; ``start`` routes again after the engine is up."""
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging_if_needed

    configure_logging_if_needed(LoggingConfig())
    reattach_serve_logs()
    return route_vllm_logs(env)


class HorizonVLLMEngine(VLLMEngine):
    """``ray.serve.llm``'s vLLM engine with a single worker kept in the engine core.

    ``_prepare_engine_config`` and ``LLMServer._get_default_engine_class`` are Ray internals
    (Ray 2.60); tests/unit/fleet/test_vllm_engine_layout.py fails if either goes away, rather
    than the engine silently getting its worker process back."""

    def _prepare_engine_config(self, callback_ctx):
        engine_args, frontend_args, vllm_config = super()._prepare_engine_config(callback_ctx)
        if model_runner_in_engine_core(engine_args, vllm_config):
            log.info("vLLM: one worker, run inside the engine core (uni executor)")
        return engine_args, frontend_args, vllm_config


class HorizonLLMServer(LLMServer):
    """``LLMServer`` reporting its engine's waiting/running requests, and the requests waiting
    for it in the gateway's priority lines, to the autoscaler; its engine is
    :class:`HorizonVLLMEngine`."""

    _demand_reader: GatewayDemandReader | None = None

    def _get_default_engine_class(self):
        return HorizonVLLMEngine

    async def start(self):
        start_replica_logging()
        apply_vllm_logging()
        await super().start()
        # A vLLM logging setup other than the default (an engine's log_level) was applied by
        # the engine's start: its dictConfig closed every log handler of this process, Serve's
        # replica log included, and printed vLLM's lines to stdout again. Undo both.
        if reattach_serve_logs():
            log.info("vLLM's logging setup had closed this replica's log; reopened")
        route_vllm_logs()
        await self._warm_up()

    async def _start_engine(self):
        """``LLMServer._start_engine`` without Ray LLM's usage-telemetry push when usage stats
        are disabled (``horizon serve`` starts Ray with ``--disable-usage-stats``): the push
        creates a detached telemetry actor, ≈ 0.4 GB resident on the CPU profile, only to tag a
        report that is never sent."""
        if usage_stats_enabled():
            return await super()._start_engine()
        if self.engine is None:
            raise ValueError("Engine is not set")
        await self.engine.start()

    async def _warm_up(self) -> None:
        """Answer one 1-token chat before the replica reports itself running.

        An engine's first generation pays one-off costs (kernel selection, allocator warm-up):
        about 30 s for the CPU profile's engine on two cores. Paying them here keeps the
        replica out of the router until it answers at its normal speed, so "ready" means ready.
        """
        model_id = self._llm_config.model_loading_config.model_id
        request = ChatCompletionRequest(model=model_id, max_tokens=1, temperature=0.0,
                                        messages=[{"role": "user", "content": "Hello"}])
        try:
            async for _ in await self.chat(request):
                pass
        except Exception as exc:  # noqa: BLE001 — a failed warm-up must not fail the replica
            log.warning("engine warm-up request failed: %s", exc)

    async def chat_body(self, body: dict):
        """``chat`` for a plain JSON body: the gateway never builds vLLM's request objects.

        Validating the body here, where vLLM is loaded anyway, keeps vLLM (and torch) out of the
        ingress (≈ 0.4 GB resident) and its request validation off the ingress's CPU. Yields
        what ``chat`` yields, with objects as plain data: SSE strings (streaming), the response
        as a dict, or an error as ``{"error": {...}}`` (vLLM's own, or the body's validation:
        code 400)."""
        async for item in self._plain(ChatCompletionRequest, body, self.chat):
            yield item

    async def completions_body(self, body: dict):
        """``completions`` for a plain JSON body, as :meth:`chat_body`."""
        async for item in self._plain(CompletionRequest, body, self.completions):
            yield item

    @staticmethod
    async def _plain(request_cls, body: dict, call):
        try:
            request = request_cls(**body)
        except ValidationError as exc:  # vLLM's own validation of the sampling fields
            yield {"error": validation_error(exc, body)}
            return
        except Exception as exc:  # noqa: BLE001 — a validator that raised something else
            yield {"error": {"message": f"invalid request: {str(exc)[:300]}", "type": "BadRequestError",
                             "code": 400}}
            return
        async for item in await call(request):
            items = item if isinstance(item, list) else [item]
            plain = [x if isinstance(x, str) else x.model_dump(exclude_none=True) for x in items]
            yield plain if isinstance(item, list) else plain[0]

    async def record_autoscaling_stats(self) -> dict[str, float]:
        if self._demand_reader is None:
            self._demand_reader = GatewayDemandReader.for_this_replica()
        return await replica_autoscaling_stats(engine_autoscaling_stats(latest_engine_stats()),
                                               self._demand_reader)


def validation_error(exc: ValidationError, body: dict) -> dict[str, Any]:
    """vLLM's request validation as an OpenAI error naming the parameter, like the gateway's own.

    Pydantic's text dumps every error with type names and links (``stop.str`` ... ``stop.list[str]``
    ... ``For further information visit``), and a union field lists one error per member. The
    parameter is the part of each location that exists in the body (``messages[1].content``);
    what follows it names a union member, not a key. The messages of the errors at the first
    such parameter are joined, one per member the value failed; of a large union (a message's
    role types) only those that got deepest into the value, the ones about its actual shape.
    """
    located: list[tuple[str, int, str]] = []
    for err in exc.errors():
        value: Any = body
        path = ""
        for part in err.get("loc", ()):
            if isinstance(value, dict) and isinstance(part, str) and part in value:
                path, value = (f"{path}.{part}" if path else part), value[part]
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                path, value = f"{path}[{part}]", value[part]
            else:
                break
        located.append((path, len(err.get("loc", ())), str(err.get("msg", "invalid"))))
    param = located[0][0] if located else ""
    here = [(depth, msg) for path, depth, msg in located if path == param]
    deepest = max((depth for depth, _ in here), default=0)
    messages = list(dict.fromkeys(msg for depth, msg in here if depth == deepest))[:3]
    return {"message": f"invalid value for '{param or 'body'}': {'; or '.join(messages)}",
            "type": "BadRequestError", "param": param or None, "code": 400}
