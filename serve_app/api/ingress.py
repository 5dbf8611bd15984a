"""The ingress deployment: the only HTTP-facing Serve deployment of the graph.

Thin by design: it parses its profile, sets up logging and metrics, asks the composition root
for this replica's gateway (``serve_app.app.compose_gateway``) and serves
``serve_app.api.http.create_app(gateway)``. Ray Serve's proxy (or HAProxy in the fast mode)
accepts or generates ``X-Request-ID`` and returns it; the same id tags every Serve log line of
the request, including lines logged by the model deployments it calls.
"""

from __future__ import annotations

from typing import Any, Optional

from ray import serve

from serve_app.config.loader import parse_config
from serve_app.observability.logging import configure_logging
from serve_app.observability.metrics import configure_metrics

from .http import create_app


def _app_name() -> Optional[str]:
    try:
        return serve.get_replica_context().app_name
    except Exception:  # noqa: BLE001 — outside a replica: every application
        return None


@serve.deployment(name="ingress")
@serve.ingress()
class HorizonIngress:
    async def __init__(self, config: dict[str, Any], handles: dict[str, Any]):
        # Imported here: the composition root imports this module to build the graph.
        from serve_app.app import compose_gateway

        cfg = parse_config(config, source="ingress args")
        configure_logging(cfg.observability, log_payloads=cfg.global_.server.log_payloads)
        configure_metrics(cfg.observability)
        self.gateway = compose_gateway(cfg, handles=handles, app_name=_app_name())
        # Deployment states and routing start in the background (async __init__: on the
        # replica's own event loop), so /health can say "starting" instead of the replica hanging.
        self.gateway.start()

    def __serve_build_asgi_app__(self):
        return create_app(self.gateway)
