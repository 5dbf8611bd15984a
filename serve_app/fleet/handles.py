"""The fleet over Ray Serve deployment handles: alias → client, built by each backend.

``serve run`` binds one handle per model deployment into the ingress; :class:`HandleFleet` asks
each alias's backend (:mod:`serve_app.fleet.backends`) for the client of that handle. Aliases
that share an engine get a client of the owner's deployment. Every client fails fast with a 503
when its deployment is not up (:class:`~serve_app.fleet.availability.DeploymentBoard`).
"""

from __future__ import annotations

from typing import Any, Optional

from ..config.models import ModelSettings
from ..config.schema import HorizonConfig
from ..errors import ModelUnavailable
from .availability import DeploymentBoard
from .backends import backend
from .names import deployment_name
from .protocol import EmbeddingEndpointClient, ModelClient


class HandleFleet:
    """The Fleet of one profile: alias → client, built from the handles the app builder bound."""

    def __init__(self, cfg: HorizonConfig, handles: dict[str, Any],
                 board: Optional[DeploymentBoard] = None):
        self._clients: dict[str, ModelClient] = {}
        self._embedder: Optional[EmbeddingEndpointClient] = None
        self.board = board
        for model in cfg.models:
            owner: ModelSettings = cfg.model(model.shares_engine_with) if model.shares_engine_with else model
            client = backend(owner.backend).client(model.alias, owner, handles[owner.alias],
                                                   deployment_name(owner.alias), board)
            if model.role == "embedding":
                self._embedder = client
            else:
                self._clients[model.alias] = client

    def client(self, alias: str) -> ModelClient:
        try:
            return self._clients[alias]
        except KeyError:
            raise ModelUnavailable(f"model {alias!r} has no chat deployment in this profile") from None

    @property
    def embedder(self) -> Optional[EmbeddingEndpointClient]:
        return self._embedder

    @property
    def aliases(self) -> list[str]:
        return list(self._clients)
