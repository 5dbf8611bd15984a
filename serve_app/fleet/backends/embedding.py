"""FlagEmbedding as a fleet backend: ``@serve.batch`` encoding behind an embedding client.

The deployment class is :class:`deployments.embedding.EmbeddingDeployment`; its client bounds
every call by the model's ``timeouts.total_s`` (template embedding at start-up and
``/v1/embeddings`` must never hang on a replica that is not coming).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import numpy as np

from deployments.embedding import EmbeddedInput, EmbeddingDeployment
from deployments.model_assets import is_bucket_uri

from ...config.models import ModelSettings
from ...config.schema import HorizonConfig
from ...errors import UpstreamTimeout
from ..availability import DeploymentBoard
from ..deployment_client import DeploymentClient
from ..protocol import EmbeddingResult, too_long
from .base import Backend


class HandleEmbeddingClient(DeploymentClient):
    def __init__(self, alias: str, handle: Any, deployment: str = "",
                 board: Optional[DeploymentBoard] = None, timeout_s: Optional[float] = None):
        super().__init__(alias, deployment, board)
        self._handle = handle
        self.timeout_s = timeout_s

    async def _call(self, call: Any) -> Any:
        try:
            return await asyncio.wait_for(call, self.timeout_s) if self.timeout_s else await call
        except asyncio.TimeoutError:
            call.cancel()
            raise UpstreamTimeout(f"model {self.alias!r} did not answer within {self.timeout_s:g} s",
                                  retry_after=1) from None
        except Exception as exc:  # noqa: BLE001
            raise self.failed(exc) from None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.check_up()
        return (await self._call(self._handle.embed.remote(list(texts)))).tolist()

    async def embed_input(self, texts: list[str], truncate_prompt_tokens: Optional[int] = None,
                          truncation_side: str = "right") -> EmbeddingResult:
        self.check_up()
        out = await self._call(self._handle.embed_input.remote(list(texts), truncate_prompt_tokens,
                                                               truncation_side))
        return embedding_result(self.alias, len(texts), out)


def embedding_result(alias: str, texts: int, out: EmbeddedInput) -> EmbeddingResult:
    """The deployment's answer for the gateway: vectors, or the 400 for a text too long."""
    if out.too_long is not None:
        raise too_long(alias, texts, out.too_long, out.tokens[out.too_long], out.limit)
    assert out.vectors is not None
    # float32 and C-ordered, as the JSON writer takes an array (json_wire): a float16 model's
    # rows are widened, not written as Python floats.
    return EmbeddingResult(np.ascontiguousarray(out.vectors, dtype=np.float32), list(out.tokens))


class EmbeddingBackend(Backend):
    kind = "embedding"
    holds_weights = True
    default_memory_gb = 1.0

    def build(self, model: ModelSettings, cfg: HorizonConfig, name: str,
              scaling: dict[str, Any]) -> Any:
        options = {**self.deployment_options(model), **scaling, "name": name}
        return EmbeddingDeployment.options(**options).bind(model.model_dump(mode="json", by_alias=True))

    def client(self, alias: str, owner: ModelSettings, handle: Any, deployment: str,
               board: Optional[DeploymentBoard]) -> HandleEmbeddingClient:
        return HandleEmbeddingClient(alias, handle, deployment, board, timeout_s=owner.timeouts.total_s)

    def engine_problems(self, model: ModelSettings) -> list[tuple[str, str]]:
        if is_bucket_uri(model.engine.model):
            # FlagEmbedding loads a path or a hub id; only ray.serve.llm downloads a bucket.
            return [("engine.model", f"{model.engine.model!r}: an object-storage folder is downloaded for "
                                     f"vllm models only; give FlagEmbedding a local path or a hub id")]
        return []


BACKEND = EmbeddingBackend()
