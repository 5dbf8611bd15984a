"""How a fleet alias names its Serve deployment (``model-<alias>``), in one place."""

from __future__ import annotations

DEPLOYMENT_PREFIX = "model-"


def deployment_name(alias: str) -> str:
    return f"{DEPLOYMENT_PREFIX}{alias}"
