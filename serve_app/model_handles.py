"""ModelClient / EmbeddingClient implementations over Ray Serve deployment handles.

Two kinds of model deployment sit behind one protocol:
- ``vllm``: a ``ray.serve.llm`` LLMServer; requests are vLLM ``ChatCompletionRequest`` objects
  and streams arrive as batches of SSE strings, which are parsed back into chunk dicts here.
- ``simulated``: :class:`deployments.simulated.SimulatedLLMDeployment`, dicts in and out.

Ray failures are mapped to :mod:`serve_app.errors` types here, once. Cancelling the awaiting
task cancels the handle call, and Serve propagates the cancellation into the replica (vLLM
aborts the sequence), which is how Fusion's round timeout reaches the engine.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Optional

from serve_app.config.models import ModelSettings
from serve_app.config.schema import HorizonConfig
from serve_app.errors import (
    ContextLengthExceeded,
    HorizonError,
    InvalidRequest,
    ModelUnavailable,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
)
from serve_app.fleet.availability import DeploymentBoard


def _map_ray_error(alias: str, exc: BaseException) -> HorizonError:
    """Translate an exception raised by a handle call into a HorizonError."""
    if isinstance(exc, HorizonError):
        return exc
    name = type(exc).__name__
    text = str(exc)
    if name == "BackPressureError":
        return RateLimited(f"model {alias!r} is at capacity (its queue is full); retry later",
                           retry_after=1)
    if name in {"DeploymentUnavailableError", "ActorDiedError", "RayActorError",
                "ActorUnavailableError", "ActorUnschedulableError"}:
        return ModelUnavailable(f"model {alias!r} is unavailable: {name}", retry_after=5)
    cause = getattr(exc, "cause", None)
    if cause is not None and cause is not exc:
        return _map_ray_error(alias, cause)
    first_line = text.strip().splitlines()[-1] if text.strip() else name
    return UpstreamError(f"model {alias!r} failed: {first_line[:300]}")


def _raise_engine_error(alias: str, error: Any) -> None:
    """vLLM's ErrorResponse (returned, not raised) → HorizonError."""
    payload = error.model_dump() if hasattr(error, "model_dump") else dict(error)
    inner = payload.get("error", payload)
    message = inner.get("message") or str(inner)
    code = inner.get("code")
    status = int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit()) else 500
    if status == 400:
        lowered = message.lower()
        if "maximum context length" in lowered or "max_model_len" in lowered or "context length" in lowered:
            raise ContextLengthExceeded(f"model {alias!r}: {message}", param="messages")
        raise InvalidRequest(f"model {alias!r} rejected the request: {message}")
    raise UpstreamError(f"model {alias!r} failed: {message}")


class _DeploymentClient:
    """What every handle client shares: its alias, its deployment and the fail-fast check."""

    def __init__(self, alias: str, deployment: str, board: Optional[DeploymentBoard]):
        self.alias = alias
        self.deployment = deployment
        self._board = board

    def _check_up(self) -> None:
        if self._board is not None:
            self._board.check(self.deployment, self.alias)


class SimulatedHandleClient(_DeploymentClient):
    """Client of a simulated deployment (dict protocol)."""

    def __init__(self, alias: str, handle: Any, deployment: str = "",
                 board: Optional[DeploymentBoard] = None):
        super().__init__(alias, deployment, board)
        self._handle = handle
        self._stream_handle = handle.options(stream=True)

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        self._check_up()
        try:
            return await self._handle.chat.remote(request)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a typed error
            raise _map_ray_error(self.alias, exc) from None

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        self._check_up()
        gen = self._stream_handle.chat_stream.remote(request)
        try:
            async for chunk in gen:
                yield chunk
        except Exception as exc:  # noqa: BLE001
            raise _map_ray_error(self.alias, exc) from None
        finally:
            gen.cancel()


class VllmHandleClient(_DeploymentClient):
    """Client of a ``ray.serve.llm`` LLMServer deployment."""

    def __init__(self, alias: str, handle: Any, served_name: str, deployment: str = "",
                 board: Optional[DeploymentBoard] = None):
        super().__init__(alias, deployment, board)
        self.served_name = served_name
        self._handle = handle.options(stream=True)

    def _request(self, body: dict[str, Any], stream: bool):
        from ray.serve.llm.openai_api_models import ChatCompletionRequest

        payload = dict(body)
        payload["model"] = self.served_name
        payload["stream"] = stream
        if stream:
            # Always ask the engine for usage; the ingress drops it if the client did not ask.
            payload["stream_options"] = {"include_usage": True}
        try:
            return ChatCompletionRequest(**payload)
        except Exception as exc:  # noqa: BLE001 — vLLM's own validation of sampling fields
            raise InvalidRequest(f"invalid request for model {self.alias!r}: {str(exc)[:300]}") from None

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        self._check_up()
        gen = self._handle.chat.remote(self._request(request, stream=False))
        try:
            async for item in gen:
                if type(item).__name__ == "ErrorResponse":
                    _raise_engine_error(self.alias, item)
                response = item.model_dump(exclude_none=True)
                response["model"] = self.alias
                return response
        except HorizonError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _map_ray_error(self.alias, exc) from None
        finally:
            gen.cancel()
        raise UpstreamError(f"model {self.alias!r} returned no response")

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        self._check_up()
        gen = self._handle.chat.remote(self._request(request, stream=True))
        try:
            async for batch in gen:
                items = batch if isinstance(batch, list) else [batch]
                for item in items:
                    if not isinstance(item, str):
                        if type(item).__name__ == "ErrorResponse":
                            _raise_engine_error(self.alias, item)
                        continue
                    for line in item.split("\n"):
                        if not line.startswith("data: "):
                            continue
                        data = line[6:].strip()
                        if data == "[DONE]":
                            continue
                        chunk = json.loads(data)
                        if "error" in chunk and "choices" not in chunk:
                            _raise_engine_error(self.alias, chunk)
                        chunk["model"] = self.alias
                        yield chunk
        except HorizonError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _map_ray_error(self.alias, exc) from None
        finally:
            gen.cancel()


class HandleEmbeddingClient(_DeploymentClient):
    """Client of an embedding deployment; every call is bounded by the model's ``timeouts.total_s``."""

    def __init__(self, alias: str, handle: Any, deployment: str = "",
                 board: Optional[DeploymentBoard] = None, timeout_s: Optional[float] = None):
        super().__init__(alias, deployment, board)
        self._handle = handle
        self.timeout_s = timeout_s

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self._check_up()
        call = self._handle.embed.remote(list(texts))
        try:
            vecs = await asyncio.wait_for(call, self.timeout_s) if self.timeout_s else await call
        except asyncio.TimeoutError:
            call.cancel()
            raise UpstreamTimeout(f"model {self.alias!r} did not answer within {self.timeout_s:g} s",
                                  retry_after=1) from None
        except Exception as exc:  # noqa: BLE001
            raise _map_ray_error(self.alias, exc) from None
        return vecs.tolist()


class HandleFleet:
    """The Fleet of one profile: alias → client, built from the handles the app builder bound."""

    def __init__(self, cfg: HorizonConfig, handles: dict[str, Any],
                 board: Optional[DeploymentBoard] = None):
        from serve_app.fleet.names import deployment_name

        self._clients: dict[str, Any] = {}
        self._embedder: Optional[HandleEmbeddingClient] = None
        self.board = board
        for model in cfg.models:
            owner: ModelSettings = cfg.model(model.shares_engine_with) if model.shares_engine_with else model
            handle = handles[owner.alias]
            deployment = deployment_name(owner.alias)
            if model.backend == "embedding":
                self._embedder = HandleEmbeddingClient(model.alias, handle, deployment, board,
                                                       timeout_s=model.timeouts.total_s)
            elif owner.backend == "vllm":
                from deployments.llm import served_model_name

                self._clients[model.alias] = VllmHandleClient(model.alias, handle, served_model_name(owner),
                                                              deployment, board)
            else:
                self._clients[model.alias] = SimulatedHandleClient(model.alias, handle, deployment, board)

    def client(self, alias: str):
        try:
            return self._clients[alias]
        except KeyError:
            raise ModelUnavailable(f"model {alias!r} has no chat deployment in this profile") from None

    @property
    def embedder(self) -> Optional[HandleEmbeddingClient]:
        return self._embedder

    @property
    def aliases(self) -> list[str]:
        return list(self._clients)
