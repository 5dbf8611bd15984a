"""How a fleet alias names its Serve deployment (``model-<alias>``), in one place."""

from __future__ import annotations

DEPLOYMENT_PREFIX = "model-"
# The HTTP-facing deployment (serve_app.app.HorizonIngress).
INGRESS_DEPLOYMENT = "ingress"


def deployment_name(alias: str) -> str:
    return f"{DEPLOYMENT_PREFIX}{alias}"
