"""A whole gateway in process: the real HTTP app, chat pipeline, routing, resilience and Fusion
over the shared fake fleet, served by FastAPI's test client. Nothing but the models is fake."""

from __future__ import annotations

import copy
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from fastapi.testclient import TestClient

from serve_app.api.http import create_app
from serve_app.app import compose_gateway
from serve_app.config.loader import parse_config
from serve_app.serving.gateway import Gateway

from .fleet import FakeEmbedder, FakeFleet, FakeModel
from .routing import VOCABULARY, profile, write_templates

ALIASES = ("k2", "qwen-72b", "r1-distill", "coder", "minicpm-v")


def gateway_profile(template_dir: Path, **overrides: Any) -> dict[str, Any]:
    """The routing test profile plus resilience chains and the embedding model as ``embed``."""
    doc = profile(write_templates(template_dir))
    doc["resilience"] = {"max_fallback_depth": 1,
                         "fallback_chains": {"chat": ["qwen-72b", "k2"], "code": ["coder", "k2"],
                                             "reasoning": ["r1-distill", "k2", "qwen-72b"]}}
    doc["unavailable_models"] = []
    for key, value in overrides.items():
        doc[key] = copy.deepcopy(value)
    return doc


@contextmanager
def running_gateway(template_dir: Path, *models: FakeModel, doc: Optional[dict[str, Any]] = None,
                    start_routing: bool = True, embedder: Optional[FakeEmbedder] = None
                    ) -> Iterator[tuple[TestClient, Gateway, FakeFleet]]:
    cfg = parse_config(doc or gateway_profile(template_dir))
    by_alias = {a: FakeModel(a) for a in ALIASES}
    by_alias.update({m.alias: m for m in models})
    fleet = FakeFleet(*by_alias.values(), embedder=embedder or FakeEmbedder(VOCABULARY))
    gateway = compose_gateway(cfg, base_fleet=fleet)
    with TestClient(create_app(gateway)) as client:
        if start_routing:
            client.portal.call(gateway.startup.run)
        yield client, gateway, fleet
