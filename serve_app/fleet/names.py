"""How a fleet alias names its Serve deployment (``model-<alias>``), in one place."""

from __future__ import annotations

# The HTTP-facing deployment (serve_app.app.HorizonIngress). Named in the config layer, which
# addresses live settings to it (serve_app.config.live).
from ..config.live import INGRESS as INGRESS_DEPLOYMENT

__all__ = ["DEPLOYMENT_PREFIX", "INGRESS_DEPLOYMENT", "deployment_name"]

DEPLOYMENT_PREFIX = "model-"


def deployment_name(alias: str) -> str:
    return f"{DEPLOYMENT_PREFIX}{alias}"
