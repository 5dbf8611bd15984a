"""The simulated engine as a fleet backend: a stand-in model for load and fault tests.

Dict requests in, dict responses and chunk dicts out (:mod:`deployments.simulated`). It reserves
the placement of the engine it stands in for (``tensor_parallel_size x pipeline_parallel_size``
bundles on GPU profiles), so a placement can be proven on a cluster of logical GPUs.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Optional

from deployments.simulated import SimulatedLLMDeployment

from ...config.models import ModelSettings
from ...messages.chunks import Chunk
from ...config.schema import HorizonConfig
from ..availability import DeploymentBoard
from ..deployment_client import DeploymentClient
from .base import Backend, actor_options


class SimulatedHandleClient(DeploymentClient):
    def __init__(self, alias: str, handle: Any, deployment: str = "",
                 board: Optional[DeploymentBoard] = None):
        super().__init__(alias, deployment, board)
        self._handle = handle
        self._stream_handle = handle.options(stream=True)

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._complete("chat", request)

    async def complete_text(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._complete("completions", request)

    async def _complete(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        self.check_up()
        try:
            return await getattr(self._handle, method).remote(request)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a typed error
            raise self.failed(exc) from None

    def stream(self, request: dict[str, Any]) -> AsyncIterator[Chunk]:
        return self._stream("chat_stream", request)

    def stream_text(self, request: dict[str, Any]) -> AsyncIterator[Chunk]:
        return self._stream("completions_stream", request)

    async def _stream(self, method: str, request: dict[str, Any]) -> AsyncIterator[Chunk]:
        self.check_up()
        gen = getattr(self._stream_handle, method).remote(request)
        try:
            async for chunk in gen:
                yield Chunk(chunk)
        except Exception as exc:  # noqa: BLE001
            raise self.failed(exc) from None
        finally:
            gen.cancel()


class SimulatedBackend(Backend):
    kind = "simulated"
    # It answers response_format with schema-valid JSON, as a grammar-constrained engine does
    # (its fault styles json / fenced_json / broken_json still override that).
    constrains_decoding = True
    default_memory_gb = 0.3
    has_kv_cache = True

    def build(self, model: ModelSettings, cfg: HorizonConfig, name: str,
              scaling: dict[str, Any]) -> Any:
        assert model.simulated is not None
        options = {**self.deployment_options(model), **scaling, "name": name,
                   "user_config": model.simulated.model_dump(mode="json")}
        return SimulatedLLMDeployment.options(**options).bind(
            model.alias, model.engine.max_model_len, cfg.simulation.latency_scale)

    def client(self, alias: str, owner: ModelSettings, handle: Any, deployment: str,
               board: Optional[DeploymentBoard]) -> SimulatedHandleClient:
        return SimulatedHandleClient(alias, handle, deployment, board)

    def workers(self, model: ModelSettings) -> int:
        return model.engine.tensor_parallel_size * model.engine.pipeline_parallel_size

    def deployment_options(self, model: ModelSettings) -> dict[str, Any]:
        return actor_options(model, self.workers(model))

    def engine_slots(self, model: ModelSettings) -> Optional[int]:
        return model.simulated.max_num_seqs if model.simulated is not None else model.engine.max_num_seqs


BACKEND = SimulatedBackend()
