"""The chat service: one request in, one answer (or chunk stream) out — no HTTP here.

It resolves the request's ``model`` (fleet alias, auto slug or Fusion slug), asks routing for a
decision when needed, runs the decision's algorithm through the fleet, and collects the
``x-vsr-*`` facts the ingress returns as headers. The ingress is a thin HTTP adapter around it,
so every behaviour here is testable with in-process fakes of the fleet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Optional

from serve_app.api.protocol import ChatCompletionRequest
from serve_app.clients import Fleet
from serve_app.config.schema import HorizonConfig
from serve_app.errors import InvalidRequest, ModelNotFound, ModelUnavailable


@dataclass
class Target:
    """Where a request goes: a fleet alias directly, or through routing."""

    kind: str  # "model" | "auto" | "fusion"
    name: str


@dataclass
class ChatOutcome:
    response: Optional[dict[str, Any]] = None
    chunks: Optional[AsyncIterator[dict[str, Any]]] = None
    headers: dict[str, str] = field(default_factory=dict)


def has_image(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            return True
    return False


class ChatService:
    def __init__(self, cfg: HorizonConfig, fleet: Fleet):
        self.cfg = cfg
        self.fleet = fleet
        self._unavailable = {u.alias: u for u in cfg.unavailable_models}

    # ------------------------------------------------------------------ model resolution
    def resolve(self, model: str) -> Target:
        if model in self.cfg.auto_slugs:
            return Target("auto", model)
        if model in self.cfg.fusion_slugs:
            return Target("fusion", model)
        if model in self.cfg.aliases:
            return Target("model", model)
        if model in self._unavailable:
            self.raise_unavailable(model)
        raise ModelNotFound(f"The model {model!r} does not exist. Available models: "
                            f"{', '.join(self.listed_models())}", param="model")

    def raise_unavailable(self, alias: str) -> None:
        u = self._unavailable[alias]
        raise ModelUnavailable(f"model {alias!r} ({u.role}) is not served by the "
                               f"{self.cfg.profile!r} profile: {u.reason}", param="model",
                               code="model_not_served")

    def listed_models(self) -> list[str]:
        return [*self.cfg.aliases, *self.cfg.auto_slugs, *self.cfg.fusion_slugs]

    def check_target_model(self, alias: str, messages: list[dict[str, Any]]) -> None:
        if alias in self._unavailable:
            self.raise_unavailable(alias)
        model = self.cfg.model(alias)
        if model.role == "embedding":
            raise InvalidRequest(f"model {alias!r} is an embedding model; use /v1/embeddings",
                                 param="model")
        if model.role != "vision" and has_image(messages):
            raise InvalidRequest(f"model {alias!r} does not accept images; send image requests to "
                                 f"a vision model or to an auto model", param="messages")

    # ------------------------------------------------------------------ serving
    async def chat(self, req: ChatCompletionRequest, *, debug: bool = False) -> ChatOutcome:
        target = self.resolve(req.model)
        body = req.engine_body()
        headers: dict[str, str] = {}
        if target.kind == "model":
            alias = target.name
        else:
            start = time.perf_counter()
            decision = self.cfg.decision(self.cfg.routing.default_decision)
            alias = decision.model_refs[0].model
            headers.update({
                "x-vsr-selected-decision": decision.name,
                "x-vsr-selected-model": alias,
                "x-vsr-routing-ms": f"{(time.perf_counter() - start) * 1000:.2f}",
            })
        self.check_target_model(alias, body["messages"])
        client = self.fleet.client(alias)
        headers["x-vsr-selected-model"] = alias
        if req.stream:
            return ChatOutcome(chunks=client.stream(body), headers=headers)
        return ChatOutcome(response=await client.complete(body), headers=headers)
