"""Which models a request may name, and what a fleet alias accepts.

A request's ``model`` is a fleet alias (served directly, still through resilience), an auto
slug (full routing) or a Fusion slug (Fusion-only routing). An alias the profile lists under
``unavailable_models`` is a 503 naming the reason; anything else is a 404.
"""

from __future__ import annotations

from typing import Any

from ..config.schema import HorizonConfig
from ..errors import InvalidRequest, ModelNotFound, ModelUnavailable
from ..messages.view import has_image
from .context import Target

# Fleet role → the task type whose fallback chain and priority a direct alias request uses.
ROLE_TASK_TYPE = {"chat": "chat", "reasoning": "reasoning", "code": "code", "vision": "vision",
                  "coordinator": "unknown", "embedding": "unknown"}


class Targets:
    def __init__(self, cfg: HorizonConfig):
        self.cfg = cfg
        self._unavailable = {u.alias: u for u in cfg.unavailable_models}

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
                            f"{', '.join(self.listed())}", param="model")

    def raise_unavailable(self, alias: str) -> None:
        u = self._unavailable[alias]
        raise ModelUnavailable(f"model {alias!r} ({u.role}) is not served by the "
                               f"{self.cfg.profile!r} profile: {u.reason}", param="model",
                               code="model_not_served")

    def served(self, alias: str) -> bool:
        """False for an alias the profile lists under ``unavailable_models``."""
        return alias not in self._unavailable

    def listed(self) -> list[str]:
        return [*self.cfg.aliases, *self.cfg.auto_slugs, *self.cfg.fusion_slugs]

    def task_type_of(self, alias: str) -> str:
        return ROLE_TASK_TYPE[self.cfg.model(alias).role]

    def check_chat_model(self, alias: str, messages: list[dict[str, Any]]) -> None:
        """A chat request for ``alias`` must go to a served chat model that takes its images."""
        if alias in self._unavailable:
            self.raise_unavailable(alias)
        model = self.cfg.model(alias)
        if model.role == "embedding":
            raise InvalidRequest(f"model {alias!r} is an embedding model; use /v1/embeddings",
                                 param="model")
        if model.role != "vision" and has_image(messages):
            raise InvalidRequest(f"model {alias!r} does not accept images; send image requests to "
                                 f"a vision model or to an auto model", param="messages")
