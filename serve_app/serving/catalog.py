"""``/v1/models``: the fleet aliases and routing slugs a caller may use."""

from __future__ import annotations

from typing import Any

from ..auth.keys import Principal
from ..config.schema import HorizonConfig
from ..errors import ModelNotFound


class ModelCatalog:
    def __init__(self, cfg: HorizonConfig, created: int):
        self.cfg = cfg
        self.created = created

    def _entry(self, model_id: str, role: str, **extra: Any) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": self.created, "owned_by": "k2-horizon",
                "role": role, **extra}

    def list(self, principal: Principal) -> dict[str, Any]:
        """The models this caller may use (with API keys on, what its key allows)."""
        data = [self._entry(m.alias, m.role, backend=m.backend)
                for m in self.cfg.models if principal.may_use_model(m.alias)]
        if principal.may_route:
            data += [self._entry(slug, "router") for slug in self.cfg.auto_slugs]
        if principal.fusion_allowed:
            data += [self._entry(slug, "fusion") for slug in self.cfg.fusion_slugs]
        return {"object": "list", "data": data}

    def retrieve(self, model_id: str, principal: Principal) -> dict[str, Any]:
        for entry in self.list(principal)["data"]:
            if entry["id"] == model_id:
                return entry
        raise ModelNotFound(f"The model {model_id!r} does not exist", param="model")
